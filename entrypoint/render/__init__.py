"""Renderers of a Plan: shell and json here; compose and k8s in their own modules."""
