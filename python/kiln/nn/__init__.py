"""kiln.nn: modules, the library's layers, and their functional forms (torch.nn)."""
from . import functional  # noqa: F401
from . import utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module, Parameter  # noqa: F401
