"""Developer tools shared by the tests and the benchmarks (never installed with rstream): ``browser``
drives the notebooks in a real JupyterLab in Chromium and judges what a person would see."""
