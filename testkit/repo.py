"""The repository's root folder, for the files the tests read (manifests, configs, Dockerfile, README)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
