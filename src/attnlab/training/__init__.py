"""The one trainer every family uses (`trainer`: the loop, resumable checkpoints, validation, progress) and the
optimizer's parameter groups and learning-rate schedules (`optim`). Never imported by decoding."""
