import sys
if any("default_worker.py" in a for a in sys.argv):
    try:
        import hop_hook
        hop_hook.setup()
    except Exception as e:
        print("probe setup failed", e, file=sys.stderr)
