"""Text in, token ids out: corpora and their readers (`corpus`, the default Bible corpus `bible`, the KJV/WEB
paraphrase pairs `paraphrase`), tokenizers (`tokenizers`), the prepared token-id store, what it is made from
and its key, and its building (`store`, `spec`, `prepare`), and batching by length (`batching`)."""
