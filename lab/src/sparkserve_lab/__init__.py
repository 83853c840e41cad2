"""The lab: what proves and measures sparkserve. It imports the product (`sparkserve`), never the reverse,
and the serving image does not carry it."""

__version__ = "0.1.0"
