"""kiln.utils: torch.utils's places (kiln.utils.data)."""
from . import data  # noqa: F401
