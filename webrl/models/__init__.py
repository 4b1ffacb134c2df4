"""Models: loading Hugging Face causal LMs, the tiny CPU Llama and its tokenizer, inference backends and the
policies built on them. Every model is a plain Hugging Face folder; nothing is downloaded at run time."""
