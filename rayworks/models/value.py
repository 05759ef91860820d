"""A critic: a (small, usually pretrained) decoder LM plus a scalar value head.

The backbone is any causal LM this package builds or loads (its transformer body is
used, the LM head is dropped); the head maps each position's last hidden state to V(s_t).
Saved as the backbone's HF folder plus `value_head.safetensors`, so a critic reloads
without pickle and its backbone stays loadable by transformers on its own.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from rayworks.models.decoder import load_causal_lm

HEAD_FILE = "value_head.safetensors"


class ValueModel(torch.nn.Module):
    def __init__(self, lm: PreTrainedModel) -> None:
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)  # start at V = 0: no bias toward any return
        torch.nn.init.zeros_(self.head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) token ids -> (B, T) values, V at position t scoring the prefix up to t."""
        body = self.lm.get_decoder() if hasattr(self.lm, "get_decoder") else self.lm.model
        hidden = body(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.head(hidden).squeeze(-1)

    def save_pretrained(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.lm.save_pretrained(directory)
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
            str(directory / HEAD_FILE),
        )

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> ValueModel:
        """A critic from a saved critic (head restored) or from any LM folder (fresh head)."""
        model = cls(load_causal_lm(directory))
        head = Path(directory) / HEAD_FILE
        if head.is_file():
            model.head.load_state_dict(load_file(str(head)))
        return model
