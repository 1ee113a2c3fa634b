"""From a trained model to text: the one beam search and greedy search (`search`), batched translation of
sentences with the model's tokenizers (`translate`), sampling from a language model (`sampling`), and serving
each request alone (`serving`)."""
