"""Representations of jobs: XML (lxml); HTML lives in templates/."""
