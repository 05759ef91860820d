"""PFT, personalised feature translation for source-free FER adaptation (Sharafi et al.,
ICLR 2026): the method (`pft`) and its baselines (`pft_source`, `pft_adabn`, `pft_tent`,
`pft_shot`, `pft_neutral_ce`, `pft_oracle`) on a reconstructed digit-subject benchmark."""

from rayworks.pipelines.pft import pipeline as pipeline
