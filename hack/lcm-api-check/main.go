// lcm-api-check validates a Kyma module's ModuleReleaseMeta and ModuleTemplates with
// lifecycle-manager's published Go types (github.com/kyma-project/lifecycle-manager/api,
// pinned in hack/lcm-api-version.env; built by hack/build-lcm-api-check.sh).
//
//	lcm-api-check MODULERELEASEMETA.yaml MODULETEMPLATE.yaml...
//
// Each file is one object, decoded strictly into api/v1beta2's ModuleReleaseMeta or
// ModuleTemplate: a duplicate key, an unknown field or a value of the wrong type is an error.
// Then what lifecycle-manager's template lookup reads is checked:
//   - the ModuleReleaseMeta is named after spec.moduleName (pkg/templatelookup
//     GetModuleReleaseMeta), has exactly one of spec.channels and spec.mandatory (the type's
//     XValidation rule), every channel once with a version (GetChannelVersionForModule), and
//     spec.ocmComponentName: the descriptor is fetched from the registry by it and the
//     template's spec.version (docs/contributor/14-creating-moduletemplate.md);
//   - for every channel, a template named v1beta2.CreateModuleTemplateName(module, version)
//     in the same namespace (moduletemplateinfolookup/common.go getTemplateByVersion), with
//     that spec.moduleName and spec.version, not mandatory, not beta or internal
//     (ModuleTemplate.SyncEnabled(false, false): offered to every Kyma), its manager and
//     info filled in, and an inline descriptor (if any) naming the same component and version.
//
// Exit 0 and one line on stdout when all holds; exit 1 and one line per finding on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/kyma-project/lifecycle-manager/api/v1beta2"
	"sigs.k8s.io/yaml"
)

const maxFileBytes = 4 << 20 // a ModuleTemplate with an inline descriptor is a few KiB

// the version pattern of ModuleTemplateSpec.Version and ChannelVersionAssignment.Version
// (their +kubebuilder:validation:Pattern markers), non-empty here: lookups need a version
var (
	semver  = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[a-zA-Z-][0-9a-zA-Z-]*)?$`)
	channel = regexp.MustCompile(`^[a-z]{3,32}$`) // ChannelVersionAssignment.Channel's markers
	// ModuleReleaseMetaSpec.ModuleName's and .OcmComponentName's patterns, non-empty here
	moduleName    = regexp.MustCompile(`^[a-z]{3,}(-[a-z]{3,})*$`)
	componentName = regexp.MustCompile(`^[a-z][-a-z0-9]*([.][a-z][-a-z0-9]*)*[.][a-z]{2,}(/[a-z][-a-z0-9_]*([.][a-z][-a-z0-9_]*)*)+$`)
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: lcm-api-check MODULERELEASEMETA.yaml MODULETEMPLATE.yaml...")
		os.Exit(2)
	}
	var findings []string
	add := func(file, format string, args ...any) {
		findings = append(findings, file+": "+fmt.Sprintf(format, args...))
	}
	mrmFile := os.Args[1]
	var mrm v1beta2.ModuleReleaseMeta
	if err := decodeStrict(mrmFile, "ModuleReleaseMeta", &mrm); err != nil {
		add(mrmFile, "%v", err)
	}
	templates := map[string]*v1beta2.ModuleTemplate{}
	templateFiles := map[string]string{}
	for _, file := range os.Args[2:] {
		t := &v1beta2.ModuleTemplate{}
		if err := decodeStrict(file, "ModuleTemplate", t); err != nil {
			add(file, "%v", err)
			continue
		}
		templates[t.Namespace+"/"+t.Name] = t
		templateFiles[t.Namespace+"/"+t.Name] = file
	}
	if len(findings) == 0 {
		for _, f := range checkReleaseMeta(&mrm) {
			add(mrmFile, "%s", f)
		}
		for key, t := range templates {
			for _, f := range checkTemplate(t, &mrm) {
				add(templateFiles[key], "%s", f)
			}
		}
		for _, f := range checkChannels(&mrm, templates) {
			add(mrmFile, "%s", f)
		}
	}
	if len(findings) > 0 {
		for _, f := range findings {
			fmt.Fprintln(os.Stderr, "lcm-api-check:", f)
		}
		os.Exit(1)
	}
	fmt.Printf("ok: ModuleReleaseMeta %s/%s and %d ModuleTemplate(s) decode strictly into %s\n",
		mrm.Namespace, mrm.Name, len(templates), v1beta2.GroupVersion)
}

// decodeStrict reads one YAML object of kind into out: duplicate keys, unknown fields,
// wrong types, trailing data and another apiVersion or kind are errors.
func decodeStrict(path, kind string, out any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxFileBytes {
		return fmt.Errorf("larger than %d bytes", maxFileBytes)
	}
	if bytes.Contains(append([]byte("\n"), data...), []byte("\n---")) {
		return errors.New("more than one YAML document (one object per file)")
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		return fmt.Errorf("not an object: %w", err)
	}
	if meta.APIVersion != v1beta2.GroupVersion.String() || meta.Kind != kind {
		return fmt.Errorf("apiVersion %q kind %q, want %q %q",
			meta.APIVersion, meta.Kind, v1beta2.GroupVersion.String(), kind)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("as %s %s: %w", v1beta2.GroupVersion, kind, err)
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

func checkReleaseMeta(m *v1beta2.ModuleReleaseMeta) []string {
	var out []string
	s := m.Spec
	if !moduleName.MatchString(s.ModuleName) || len(s.ModuleName) > 64 {
		out = append(out, fmt.Sprintf("spec.moduleName %q is not a module name", s.ModuleName))
	} else if m.Name != s.ModuleName {
		out = append(out, fmt.Sprintf("metadata.name %q is not spec.moduleName %q (lifecycle-manager gets it by the module's name)", m.Name, s.ModuleName))
	}
	if m.Namespace == "" {
		out = append(out, "metadata.namespace is empty (it must be the Kyma CRs' namespace)")
	}
	if s.OcmComponentName == "" {
		out = append(out, "spec.ocmComponentName is empty (the descriptor is fetched by it)")
	} else if !componentName.MatchString(s.OcmComponentName) || len(s.OcmComponentName) > 255 {
		out = append(out, fmt.Sprintf("spec.ocmComponentName %q is not an OCM component name", s.OcmComponentName))
	}
	if (s.Mandatory == nil) == (len(s.Channels) == 0) {
		out = append(out, "exactly one of spec.mandatory or spec.channels must be set")
	}
	if s.Mandatory != nil && !semver.MatchString(s.Mandatory.Version) {
		out = append(out, fmt.Sprintf("spec.mandatory.version %q is not a version", s.Mandatory.Version))
	}
	if s.Beta || s.Internal {
		out = append(out, "spec.beta or spec.internal is set: only beta or internal Kymas would get the module")
	}
	seen := map[string]bool{}
	for i, c := range s.Channels {
		if !channel.MatchString(c.Channel) {
			out = append(out, fmt.Sprintf("spec.channels[%d].channel %q is not a channel name", i, c.Channel))
		}
		if seen[c.Channel] {
			out = append(out, fmt.Sprintf("spec.channels[%d]: channel %q twice", i, c.Channel))
		}
		seen[c.Channel] = true
		if !semver.MatchString(c.Version) {
			out = append(out, fmt.Sprintf("spec.channels[%d].version %q is not a version", i, c.Version))
		}
	}
	return out
}

func checkTemplate(t *v1beta2.ModuleTemplate, m *v1beta2.ModuleReleaseMeta) []string {
	var out []string
	s := t.Spec
	if s.ModuleName != m.Spec.ModuleName {
		out = append(out, fmt.Sprintf("spec.moduleName %q is not the ModuleReleaseMeta's %q", s.ModuleName, m.Spec.ModuleName))
	}
	if !semver.MatchString(s.Version) {
		out = append(out, fmt.Sprintf("spec.version %q is not a version", s.Version))
	}
	if want := v1beta2.CreateModuleTemplateName(s.ModuleName, s.Version); t.Name != want {
		out = append(out, fmt.Sprintf("metadata.name %q, lifecycle-manager looks up %q", t.Name, want))
	}
	if t.Namespace != m.Namespace {
		out = append(out, fmt.Sprintf("metadata.namespace %q is not the ModuleReleaseMeta's %q", t.Namespace, m.Namespace))
	}
	if t.IsMandatory() {
		out = append(out, "spec.mandatory is true for a module released by channels")
	}
	if !t.SyncEnabled(false, false) {
		out = append(out, "beta or internal label: not offered to every Kyma")
	}
	if s.Manager == nil || s.Manager.Name == "" || s.Manager.Kind == "" || s.Manager.Version == "" {
		out = append(out, "spec.manager needs kind, version and name (the readiness indicator)")
	}
	if s.Info == nil || s.Info.Repository == "" || s.Info.Documentation == "" {
		out = append(out, "spec.info needs repository and documentation")
	}
	for i, r := range s.Resources {
		if r.Name == "" || r.Link == "" {
			out = append(out, fmt.Sprintf("spec.resources[%d] needs name and link", i))
		}
	}
	if len(s.Descriptor.Raw) > 0 && string(s.Descriptor.Raw) != "null" {
		var d struct {
			Component struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"component"`
		}
		if err := json.Unmarshal(s.Descriptor.Raw, &d); err != nil {
			out = append(out, fmt.Sprintf("spec.descriptor: %v", err))
		} else if d.Component.Name != m.Spec.OcmComponentName || d.Component.Version != s.Version {
			out = append(out, fmt.Sprintf("spec.descriptor names %s:%s, not %s:%s",
				d.Component.Name, d.Component.Version, m.Spec.OcmComponentName, s.Version))
		}
	}
	return out
}

// checkChannels: every channel's version resolves to one of the templates given.
func checkChannels(m *v1beta2.ModuleReleaseMeta, templates map[string]*v1beta2.ModuleTemplate) []string {
	var out []string
	for _, c := range m.Spec.Channels {
		name := v1beta2.CreateModuleTemplateName(m.Spec.ModuleName, c.Version)
		if _, ok := templates[m.Namespace+"/"+name]; !ok {
			out = append(out, fmt.Sprintf("channel %q: no ModuleTemplate %s/%s among the files given", c.Channel, m.Namespace, name))
		}
	}
	return out
}
