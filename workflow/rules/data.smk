rule cifar10:
    """Download CIFAR-10 once (torchvision) and cache it as one tensor file; offline, this fails
    at once with a message saying what to do."""
    output:
        f"{DATA}/{CACHE_NAME}",
    log:
        f"{RESULTS}/logs/cifar10.log",
    conda:
        ENV
    script:
        "../scripts/data.py"
