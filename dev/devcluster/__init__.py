"""The local development cluster: builds the control plane (etcd, kube-apiserver, kwok, ...) from the Go module
proxy, runs it on 127.0.0.1, runs the demo, and launches the real `tritonserver` for tests. A tool of this repository
(dev/ on the Python path: pytest's `pythonpath`, `make demo`), not part of the installed operator or its image."""
