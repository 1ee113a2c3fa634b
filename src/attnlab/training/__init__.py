"""The one trainer every family uses (`trainer`: the loop, resumable checkpoints, validation, progress), the state
a checkpoint holds to continue exactly (`state`), Ctrl-C at an update's end (`interrupt`), and the optimizer's
parameter groups and learning-rate schedules (`optim`). Never imported by decoding."""
