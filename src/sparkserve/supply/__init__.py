"""The supply chain: pins, hash locks, upstream sources, source trees, wheels and the patch series.

Everything that decides *which* bytes end up in the image: `pins.toml` -> `locks/` (uv) -> wheels;
sdists -> git source trees (dev) with `patches/` applied as commits, or the series applied to an
installed site-packages (image).
"""
