// The Go SDK for csi-node-driver-registrar policy plugins. A plugin is a Go
// package that calls policy.Export in its init; build-plugin turns it into a
// WebAssembly component. See README.md.
module github.com/csi-registrar/policy-go

go 1.25
