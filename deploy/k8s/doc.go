// Package k8s holds no code: it is the home of the Kubernetes manifests
// (base/ and overlays/, rendered with kustomize) and of the test that
// validates them offline. The test renders every kustomization, decodes
// each object strictly into the k8s.io/api types (unknown fields fail), and
// checks the manifests against the code they deploy: the binaries' real
// flags and environment variables (it builds them and runs --help), the
// etcd flags (parsed by the etcd server's own flag set), ports, probes and
// the images the Dockerfile builds.
package k8s
