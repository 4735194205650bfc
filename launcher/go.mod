// llmb-exec: the exec client of multi-node TensorRT-LLM leaders (see main.go). Built into the operator image
// (Dockerfile) and, for the tests, by dev/devcluster/build.py from the Go module proxy.
module llmbackend.dev/launcher

go 1.26.0

require github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674

require golang.org/x/net v0.26.0 // indirect
