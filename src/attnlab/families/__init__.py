"""The model families, one module each, and the table that names them (`table`): translation (RNN seq2seq and
Transformer, `translation`), the decoder-only language model (`lm`), paraphrase pairs (`pairs`, with the pretrained
MiniLM encoder of `pretrained`) and the many-to-one RNN for series (`series`). `base` holds the types a family row
and a loaded run are made of. Adding a family means adding a module here and a row to the table."""
