"""attnlab models to and from other toolkits: the CTranslate2 export (`ctranslate2`), and Hugging Face
`transformers` in and out (`huggingface`: the kinds each family is exported to and imported from), with one
module per architecture (`marian`: MarianMT and Pegasus encoder-decoders; `gpt2`: decoder-only LMs; `bert`:
BERT-class encoders, imported) on the reading and writing of a Hugging Face folder (`hf_folder`)."""
