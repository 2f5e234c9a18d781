package peers

// The kubelet's own version rule (k8s.io/apimachinery pkg/util/version
// HighestSupportedVersion, which the CSI handler's validateVersions calls)
// against the shared vectors the Rust host is tested with (src/validate.rs).

import (
	"encoding/json"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

type versionCase struct {
	Versions []string `json:"versions"`
	Highest  *string  `json:"highest"`
}

func TestKubeletVersionRuleMatchesTheSharedVectors(t *testing.T) {
	raw, err := os.ReadFile("../vectors/kubelet-versions.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []versionCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 20 {
		t.Fatalf("only %d cases read", len(file.Cases))
	}
	for _, c := range file.Cases {
		got, err := version.HighestSupportedVersion(c.Versions)
		switch {
		case c.Highest == nil && err == nil:
			t.Errorf("%q: the kubelet accepts it (highest %s), the vectors say it refuses", c.Versions, got)
		case c.Highest != nil && err != nil:
			t.Errorf("%q: the kubelet refuses it (%v), the vectors say %s", c.Versions, err, *c.Highest)
		case c.Highest != nil && got.String() != *c.Highest:
			t.Errorf("%q: the kubelet's highest is %s, the vectors say %s", c.Versions, got, *c.Highest)
		}
	}
}
