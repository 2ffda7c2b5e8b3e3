// Package k8s holds no code: it is the home of the Kubernetes manifests
// (base/ and overlays/, rendered with kustomize) and of the tests that
// validate them offline. The tests render every kustomization (with test
// values in the git-ignored secret files an operator writes for
// overlays/s3), decode each object strictly into the k8s.io/api types, or
// for cert-manager's custom resources into small structs of the fields
// used (unknown fields fail), and check the manifests against the code they
// deploy: the binaries' real flags and environment variables (it builds
// them and runs --help), the etcd flags (parsed by the etcd server's own
// flag set), ports, probes and the images the Dockerfile builds. They also
// check the security wiring: that the NetworkPolicies' selectors and ports
// name real pods and ports and admit exactly the connections needed, that
// every Certificate's issuer exists and every TLS file a pod reads is a
// Certificate's Secret valid for the names it is reached by, and that no
// placeholder value would be applied. Without -short, gravelerd and the
// cleaner run against an etcd started with the rendered etcd arguments and
// certificates issued as the Certificates describe.
//
// Concurrency: there is nothing to call. The tests do not run in parallel
// (none calls t.Parallel) and build the binaries once per run.
//
// Errors: none returned. A test fails naming the manifest's object and
// field that disagree with the code, or the live run that failed.
package k8s
