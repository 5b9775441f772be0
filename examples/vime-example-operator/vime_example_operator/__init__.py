"""An example selected-log-prob operator package for vime-mismatch-lab (docs/plugging-in-an-operator.md)."""
