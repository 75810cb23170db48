package opaplugins

import (
	"fmt"
	"os"
	"regexp"

	"sigs.k8s.io/yaml"
)

// envReference is what OPA substitutes in its configuration file: ${NAME}.
var envReference = regexp.MustCompile(`\$\{([^}]+)\}`)

// ReadConfigFile reads an OPA configuration file (YAML or JSON), substitutes
// ${NAME} with the environment's NAME (empty when unset) as OPA does, and
// returns it as JSON.
func ReadConfigFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the OPA configuration file: %w", err)
	}
	substituted := envReference.ReplaceAllFunc(raw, func(ref []byte) []byte {
		return []byte(os.Getenv(string(envReference.FindSubmatch(ref)[1])))
	})
	js, err := yaml.YAMLToJSON(substituted)
	if err != nil {
		return nil, fmt.Errorf("parsing the OPA configuration file %s: %w", path, err)
	}
	return js, nil
}
