// Package versions advertises the supported versions from its settings
// instead of ["1.0.0"]. The kubelet refuses a second registration of a
// driver name unless it advertises a strictly higher version, so a same-name
// handover (a new registrar taking over while the old one still runs)
// advertises e.g. ["1.0.1"]. The Go port of plugins/examples/versions; the
// same cases.toml checks both.
package versions

import (
	"errors"

	policy "github.com/csi-registrar/policy-go"
)

// Settings is the plugin's TOML settings table.
type Settings struct {
	Versions []string `json:"versions"`
}

// ChooseVersions is the plugin.
type ChooseVersions struct{}

// Name is the plugin's name in the registrar's logs.
func (ChooseVersions) Name() string { return "versions" }

// Version is the plugin's version.
func (ChooseVersions) Version() string { return "0.1.0" }

// Validate refuses an empty list.
func (ChooseVersions) Validate(s Settings) error {
	if len(s.Versions) == 0 {
		return errors.New("versions is empty; the kubelet needs at least one 1.x version")
	}
	return nil
}

// SupportedVersions advertises the configured versions, whatever came before.
func (ChooseVersions) SupportedVersions(ctx *policy.Context[Settings], _ []string) ([]string, error) {
	return ctx.Settings.Versions, nil
}

func init() { policy.Export[Settings](ChooseVersions{}) }
