"""attnlab: attention-based sequence models to train, compare and look inside."""

__version__ = "0.1.0"
