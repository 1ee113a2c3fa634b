"""The models as the papers write them, every `nn.Module` that computes a model: the one attention core every model
uses (`attention`: dot, general, parameterized and additive scores, multi-head), RNN cells and layers (`rnn`), the
RNN encoder-decoder with or without attention (`rnn_seq2seq`), the Transformer encoder-decoder and its layers
(`transformer`), the decoder-only Transformer LM (`lm`), the decomposable attention model (`decomposable`), BERT's
encoder and the Siamese pair classifier on it (`bert`) and the many-to-one RNN for series (`series`). Modules here
take tensors and give tensors: no files, no corpora. Where a fast path of `attnlab.kernels` computes the same
thing, the model calls it while the kernels are on (``ATTNLAB_KERNELS=0`` or `attnlab.kernels.disabled()`: only the
expressions written here)."""
