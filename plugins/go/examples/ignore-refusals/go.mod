module github.com/csi-registrar/policy-go/examples/ignore-refusals

go 1.25

require github.com/csi-registrar/policy-go v0.0.0

replace github.com/csi-registrar/policy-go => ../..
