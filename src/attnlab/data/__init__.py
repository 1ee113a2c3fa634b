"""Text in, token ids out: corpora and their readers (`corpus`, the default Bible corpus `bible`, the KJV/WEB
paraphrase pairs `paraphrase`), tokenizers (`tokenizers`), the prepared token-id store and its building
(`store`, `prepare`), and batching by length (`batching`)."""
