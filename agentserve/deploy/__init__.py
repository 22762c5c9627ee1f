"""Deployment artefacts generated from code: KubeRay manifests and the Grafana dashboard."""
