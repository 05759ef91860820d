"""Common Corpus curation on Ray Data (issue 6): leaf modules so far.

`pii` (validated PII redaction), `minhash` (MinHash-LSH near-duplicate detection) and
`licenses` (license evidence from package METADATA and Debian copyright files to an SPDX id
and an open/closed class). They are pure Python + numpy, with no Ray import, so that Ray
Data `map_batches` steps can call them; the runner and its registration come later.
"""
