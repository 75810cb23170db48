package opaplugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"
)

// addDataFile puts a bundle's data file (data.json, data.yaml or data.yml; other
// raw files are not data) at the path of its directory, as OPA does: /a/b/data.json
// holding {"c": 1} is data.a.b.c.
func addDataFile(data map[string]any, file string, raw []byte) error {
	base := path.Base(file)
	switch base {
	case "data.json":
	case "data.yaml", "data.yml":
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return fmt.Errorf("data file %s: %w", file, err)
		}
		raw = js
	default:
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("data file %s: %w", file, err)
	}
	var segs []string
	if dir := strings.Trim(path.Dir(file), "/."); dir != "" {
		segs = strings.Split(dir, "/")
	}
	return mergeAt(data, segs, v, file)
}

// mergeAt merges v into data at segs: objects merge key by key, anything else set
// twice is an error (OPA refuses such a bundle too).
func mergeAt(data map[string]any, segs []string, v any, file string) error {
	if len(segs) == 0 {
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("data file %s: the top level must be an object", file)
		}
		for k, val := range obj {
			if err := mergeKey(data, k, val, file); err != nil {
				return err
			}
		}
		return nil
	}
	next, ok := data[segs[0]]
	if !ok {
		next = map[string]any{}
		data[segs[0]] = next
	}
	obj, ok := next.(map[string]any)
	if !ok {
		return fmt.Errorf("data file %s: data.%s is not an object", file, segs[0])
	}
	return mergeAt(obj, segs[1:], v, file)
}

func mergeKey(data map[string]any, k string, v any, file string) error {
	old, exists := data[k]
	if !exists {
		data[k] = v
		return nil
	}
	oldObj, ok1 := old.(map[string]any)
	newObj, ok2 := v.(map[string]any)
	if !ok1 || !ok2 {
		return fmt.Errorf("data file %s: %s is set twice", file, k)
	}
	for key, val := range newObj {
		if err := mergeKey(oldObj, key, val, file); err != nil {
			return err
		}
	}
	return nil
}
