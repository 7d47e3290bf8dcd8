package driver

import (
	"fmt"
	"strconv"
)

// Field types a driver config value may have. Config values are strings
// (a pool's driverConfig is a string map); the type says how the driver
// reads them, and admission checks they parse that way.
const (
	FieldString  = "string"
	FieldInteger = "integer"
	FieldBoolean = "boolean"
)

// Field is one key of a driver's config.
type Field struct {
	// Name is the key in a pool's spec.template.driverConfig.
	Name string `json:"name"`
	// Type is string, integer or boolean.
	Type string `json:"type"`
	// Required fields must be set by every pool.
	Required bool `json:"required,omitempty"`
	// Default is what the driver uses when the key is absent.
	Default string `json:"default,omitempty"`
	// Description says what the field does, for users reading the schema.
	Description string `json:"description,omitempty"`
}

// Schema is the config a driver accepts: `muster-driver-NAME schema` prints
// it. Config is stored on the MachinePool in plaintext, so a schema never
// has a field for a secret: drivers take credentials from their host (a key
// file, an instance role), never from the config.
type Schema struct {
	// Description says what the driver makes.
	Description string `json:"description,omitempty"`
	// Fields are the keys it accepts; any other key is refused.
	Fields []Field `json:"fields"`
	// Validates says the driver answers `validate`: the server asks it
	// about every pool's config at admission, beyond these fields' types,
	// and treats its refusal as permanent (a Machine whose config it
	// refuses is not retried forever on remove).
	Validates bool `json:"validates,omitempty"`
}

// maxConfigValue bounds one config value: configs live on the pool and
// are copied to every driver call.
const maxConfigValue = 4096

// Check returns one message per problem of config against s: an unknown
// key, a required key missing, a value that does not parse as its type.
// The map is keyed by config key, so admission can point at the field;
// messages do not repeat the schema, which the caller describes once.
func (s Schema) Check(config map[string]string) map[string]string {
	problems := map[string]string{}
	known := map[string]Field{}
	for _, f := range s.Fields {
		known[f.Name] = f
	}
	for k, v := range config {
		f, ok := known[k]
		if !ok {
			problems[k] = "unknown field"
			continue
		}
		if len(v) > maxConfigValue {
			problems[k] = fmt.Sprintf("value is %d bytes; at most %d", len(v), maxConfigValue)
			continue
		}
		switch f.Type {
		case FieldInteger:
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				problems[k] = fmt.Sprintf("%q is not an integer", v)
			}
		case FieldBoolean:
			if _, err := strconv.ParseBool(v); err != nil {
				problems[k] = fmt.Sprintf("%q is not true or false", v)
			}
		}
	}
	for _, f := range s.Fields {
		if _, ok := config[f.Name]; f.Required && !ok {
			problems[f.Name] = "required by the driver"
		}
	}
	return problems
}

// Valid checks the schema itself, as a driver printed it.
func (s Schema) Valid() error {
	seen := map[string]bool{}
	for _, f := range s.Fields {
		if f.Name == "" || seen[f.Name] {
			return fmt.Errorf("field %q is empty or repeated", f.Name)
		}
		seen[f.Name] = true
		switch f.Type {
		case FieldString, FieldInteger, FieldBoolean:
		default:
			return fmt.Errorf("field %q has type %q; use string, integer or boolean", f.Name, f.Type)
		}
	}
	return nil
}
