"""The models as the papers write them: the one attention core every model uses (`attention`: dot, general,
parameterized and additive scores, multi-head), RNN cells and layers (`rnn`), the RNN encoder-decoder with or
without attention (`rnn_seq2seq`), the Transformer encoder-decoder and decoder-only stack (`transformer`) and the
decomposable attention model (`decomposable`). Modules here take tensors and give tensors: no files, no corpora.
Where a fast path of `attnlab.kernels` computes the same thing, the model calls it while the kernels are on
(``ATTNLAB_KERNELS=0`` or `attnlab.kernels.disabled()`: only the expressions written here)."""
