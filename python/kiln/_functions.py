"""kiln.<name> for every public op and function of the registries (signatures from their
schemas; the stub kiln/_functions.pyi is generated from the same schemas at install time)."""
from . import _C

globals().update(_C.functions.top)
__all__ = sorted(_C.functions.top)
