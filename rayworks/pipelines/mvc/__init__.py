"""MambaVoiceCloning (arXiv 2604.00292; official code aiai-9/MVC, partial): SSM-only
conditioning for TTS under a fixed decoder (`mvc`) against the attention/LSTM stack
(`mvc_attn`), on a local espeak-ng corpus."""

from rayworks.pipelines.mvc import pipeline as pipeline
