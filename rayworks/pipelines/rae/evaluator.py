"""The independent evaluation classifier and the Fréchet distance in its feature space
(our recipe's metrics, reconstructed: FID's Inception replaced by a small digit CNN) plus the
linear probe of a latent."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


class DigitClassifier(nn.Module):
    """[B, 1, 16, 16] → logits; `features` is the penultimate ReLU layer (the FD space)."""

    def __init__(self, hidden: int = 32, feature_dim: int = 64) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, hidden, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(hidden, 2 * hidden, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * hidden * 16, feature_dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(feature_dim, 10)

    def features(self, images: Tensor) -> Tensor:
        return self.conv(images)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.features(images))


def _sqrt_psd(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(m)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """‖μ_a - μ_b‖² + tr(Σ_a + Σ_b - 2 (Σ_a Σ_b)^{1/2}) between two feature sets [N, D].

    tr((Σ_a Σ_b)^{1/2}) is taken as Σ √λ of the symmetric PSD Σ_a^{1/2} Σ_b Σ_a^{1/2} (the
    same eigenvalues): exact also when a covariance is singular (fewer samples than
    features), where `scipy.linalg.sqrtm` of the product warns and loses accuracy."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    half = _sqrt_psd(cov_a)
    inner = half @ cov_b @ half
    tr_root = np.sqrt(np.clip(np.linalg.eigvalsh((inner + inner.T) / 2), 0, None)).sum()
    value = ((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2 * tr_root
    return float(max(value, 0.0))


@torch.no_grad()
def classifier_scores(
    clf: DigitClassifier, images: Tensor, labels: Tensor, reference: np.ndarray
) -> dict[str, float]:
    """FD of `images` against the reference features and the classifier's accuracy on them."""
    feats = clf.features(images)
    acc = (clf.head(feats).argmax(1) == labels).float().mean()
    return {"fd": frechet_distance(feats.double().numpy(), reference), "acc": float(acc)}


def linear_probe(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor) -> float:
    """Test accuracy of a logistic regression on flattened latents (standardised)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x.flatten(1).numpy())
    model = LogisticRegression(max_iter=500, C=1.0)
    model.fit(scaler.transform(train_x.flatten(1).numpy()), train_y.numpy())
    return float(model.score(scaler.transform(test_x.flatten(1).numpy()), test_y.numpy()))
