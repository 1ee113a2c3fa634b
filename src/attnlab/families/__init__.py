"""The model families, one module each, and the table that names them (`table`): translation (RNN seq2seq and
Transformer, `translation`), the decoder-only language model (`lm`), paraphrase pairs (`pairs`, with the
all-MiniLM-L6-v2 encoder of `minilm`), BERT-class encoders imported to explore (`bert`) and the many-to-one RNN for
series (`series`). `base` holds the types a family row and a loaded run are made of; `explorer` what a family's
explore hook records. A family owns its config, data and task hooks; its network is in `attnlab.nn`. Adding a
family means adding a module here and a row to the table."""
