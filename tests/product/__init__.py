"""Tests of the whole product: README, docs, truth tables, corpus, kills, hostile input, layers."""
