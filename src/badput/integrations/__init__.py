"""Ready integrations with training frameworks, one line each to switch on.

Each module imports its framework when it is imported itself (never by
``import badput`` or this package); a missing framework raises
:class:`~badput.runtime.optional.MissingExtraError` naming the extra to install:

- ``badput.integrations.torch``: a data loader wrapper timing each batch fetch;
  ``torch.distributed.checkpoint`` save / async save / load timing (``badput[torch]``).
- ``badput.integrations.lightning``: ``BadputCallback`` for PyTorch Lightning,
  checkpoint save and restore timed by a ``CheckpointIO`` wrapper (``badput[lightning]``).
- ``badput.integrations.transformers``: ``BadputCallback`` for the Hugging Face
  ``Trainer`` (``badput[transformers]``).
- ``badput.integrations.keras``: ``BadputCallback`` for Keras 3 (``badput[keras]``).
- ``badput.integrations.jax``: Orbax ``CheckpointManager`` save, commit and restore
  timing (``badput[jax]``).

See docs/integrations.md for what each one records and what the framework cannot tell.
"""

from __future__ import annotations

__all__: list[str] = []
