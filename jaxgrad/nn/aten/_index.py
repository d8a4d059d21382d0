"""Indexing ATen ops: gather and scatter, advanced indexing, embedding lookup."""

from __future__ import annotations
