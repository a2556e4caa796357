"""kiln.nn.utils (torch.nn.utils)."""
from .._C import clip_grad_norm_  # noqa: F401
