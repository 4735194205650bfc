// Command argocd-health evaluates a health.lua with Argo CD's own code: util/lua (the gopher-lua VM Argo CD
// embeds) and gitops-engine's health.GetResourceHealth (the entry point of the application controller).
//
//	argocd-health -tests DIR [-argocd-cm FILE]   run DIR/health_test.yaml (argo-cd resource_customizations layout)
//	argocd-health -argocd-cm FILE OBJECT...      print the health of each object (YAML or JSON; "-" reads stdin)
//
// Every result is one JSON line. With -tests, each case is evaluated twice: as argo-cd's own
// resource_customizations test does (VM.ExecuteHealthLua on DIR/health.lua, open libs), and as the controller
// does for a user's override from argocd-cm (health.GetResourceHealth with lua.ResourceHealthOverrides, no
// open libs, deletion handled before the script). Exit status 1 when any case differs from health_test.yaml.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The argocd-cm key prefix of a health customization: resource.customizations.health.<group>_<Kind>.
const healthKeyPrefix = "resource.customizations.health."

type testFile struct {
	Tests []struct {
		InputPath    string              `json:"inputPath"`
		HealthStatus health.HealthStatus `json:"healthStatus"`
	} `json:"tests"`
}

type result struct {
	InputPath  string               `json:"inputPath,omitempty"`
	Want       *health.HealthStatus `json:"want,omitempty"`
	VM         *health.HealthStatus `json:"vm,omitempty"`
	Controller *health.HealthStatus `json:"controller,omitempty"`
	Error      string               `json:"error,omitempty"`
	OK         bool                 `json:"ok"`
}

func main() {
	tests := flag.String("tests", "", "directory with health.lua, health_test.yaml and testdata/")
	cm := flag.String("argocd-cm", "", "argocd-cm ConfigMap (or patch) holding resource.customizations.health.* keys")
	flag.Parse()

	var overrides lua.ResourceHealthOverrides
	if *cm != "" {
		var err error
		if overrides, err = readOverrides(*cm); err != nil {
			fail(err)
		}
	}
	out := json.NewEncoder(os.Stdout)
	failed := false
	if *tests != "" {
		results, err := runTests(*tests, overrides)
		if err != nil {
			fail(err)
		}
		for _, r := range results {
			failed = failed || !r.OK
			_ = out.Encode(r)
		}
	} else {
		if overrides == nil {
			fail(fmt.Errorf("-argocd-cm is needed to evaluate objects"))
		}
		for _, path := range flag.Args() {
			obj, err := readObject(path)
			r := result{InputPath: path}
			if err == nil {
				r.Controller, err = health.GetResourceHealth(obj, overrides)
			}
			if err != nil {
				r.Error = err.Error()
			}
			r.OK = err == nil
			failed = failed || !r.OK
			_ = out.Encode(r)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func runTests(dir string, overrides lua.ResourceHealthOverrides) ([]result, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
	if err != nil {
		return nil, err
	}
	var spec testFile
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("health_test.yaml: %w", err)
	}
	if len(spec.Tests) == 0 {
		return nil, fmt.Errorf("%s/health_test.yaml has no tests", dir)
	}
	script, err := os.ReadFile(filepath.Join(dir, "health.lua"))
	if err != nil {
		return nil, err
	}
	var results []result
	for _, tc := range spec.Tests {
		want := tc.HealthStatus
		r := result{InputPath: tc.InputPath, Want: &want}
		obj, err := readObject(filepath.Join(dir, tc.InputPath))
		if err == nil {
			// As argo-cd's util/lua TestLuaHealthScript runs the built-in scripts.
			r.VM, err = lua.VM{UseOpenLibs: true}.ExecuteHealthLua(obj, string(script))
		}
		if err == nil && overrides != nil {
			r.Controller, err = health.GetResourceHealth(obj, overrides)
		}
		if err != nil {
			r.Error = err.Error()
		}
		r.OK = err == nil && same(r.VM, &want) && (overrides == nil || same(r.Controller, &want))
		results = append(results, r)
	}
	return results, nil
}

func same(got, want *health.HealthStatus) bool {
	return got != nil && got.Status == want.Status && got.Message == want.Message
}

// readOverrides reads the health customizations of an argocd-cm ConfigMap the way Argo CD's settings do:
// key resource.customizations.health.<group>_<Kind> -> override for "<group>/<Kind>".
func readOverrides(path string) (lua.ResourceHealthOverrides, error) {
	obj, err := readObject(path)
	if err != nil {
		return nil, err
	}
	data, _, err := unstructured.NestedStringMap(obj.Object, "data")
	if err != nil {
		return nil, fmt.Errorf("%s: data: %w", path, err)
	}
	overrides := lua.ResourceHealthOverrides{}
	for key, script := range data {
		if groupKind, ok := strings.CutPrefix(key, healthKeyPrefix); ok {
			overrides[strings.Replace(groupKind, "_", "/", 1)] = appv1.ResourceOverride{HealthLua: script}
		}
	}
	if len(overrides) == 0 {
		return nil, fmt.Errorf("%s has no %s* key", path, healthKeyPrefix)
	}
	return overrides, nil
}

func readObject(path string) (*unstructured.Unstructured, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "argocd-health:", err)
	os.Exit(2)
}
