"""One module per wire API: its decoder and its reply for the generation driver (ingress/driver.py), and its other routes."""
