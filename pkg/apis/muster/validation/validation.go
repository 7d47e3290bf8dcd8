package validation

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Checks shared by several kinds. Each error names the field and says what
// is allowed, so a 422 tells the operator how to fix the object.

func validateDNSSubdomain(value string, path *field.Path, required bool) field.ErrorList {
	if value == "" {
		if required {
			return field.ErrorList{field.Required(path, "must be the name of an object (a DNS-1123 subdomain)")}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

func validateRoles(roles []string, path *field.Path) field.ErrorList {
	const maxRoles = 16
	var errs field.ErrorList
	if len(roles) > maxRoles {
		errs = append(errs, field.TooMany(path, len(roles), maxRoles))
	}
	seen := map[string]bool{}
	for i, r := range roles {
		for _, msg := range utilvalidation.IsDNS1123Label(r) {
			errs = append(errs, field.Invalid(path.Index(i), r, msg))
		}
		if seen[r] {
			errs = append(errs, field.Duplicate(path.Index(i), r))
		}
		seen[r] = true
	}
	return errs
}

func validateLabels(labels map[string]string, path *field.Path) field.ErrorList {
	const maxLabels = 64
	errs := metav1validation.ValidateLabels(labels, path)
	if len(labels) > maxLabels {
		errs = append(errs, field.TooMany(path, len(labels), maxLabels))
	}
	return errs
}

func validateMaxLen(value string, max int, path *field.Path) field.ErrorList {
	if len(value) > max {
		return field.ErrorList{field.TooLong(path, "", max)}
	}
	return nil
}

// validateToken checks an opaque identifier such as a clientID: printable,
// no whitespace, bounded.
func validateIdentifier(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if errs := validateMaxLen(value, 128, path); errs != nil {
		return errs
	}
	for _, r := range value {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return field.ErrorList{field.Invalid(path, value, "may contain only letters, digits, '-', '_' and '.'")}
		}
	}
	return nil
}

func validateImmutable(newVal, oldVal interface{}, path *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(newVal, oldVal, path)
}

func validateHostPort(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "must be host:port")}
	}
	if _, port, err := net.SplitHostPort(value); err != nil || port == "" {
		return field.ErrorList{field.Invalid(path, value, fmt.Sprintf("must be host:port, e.g. 10.0.0.1:9443 (%v)", err))}
	}
	return nil
}

func validateNonNegative(value int32, path *field.Path) field.ErrorList {
	if value < 0 {
		return field.ErrorList{field.Invalid(path, value, "must be zero or greater")}
	}
	return nil
}

// maxAddresses bounds a machine's address list: a host has a handful.
const maxAddresses = 32

var addressTypes = map[api.MachineAddressType]bool{
	api.MachineHostName: true, api.MachineInternalIP: true, api.MachineExternalIP: true,
}

func validateAddresses(addrs []api.MachineAddress, path *field.Path) field.ErrorList {
	if len(addrs) > maxAddresses {
		return field.ErrorList{field.TooMany(path, len(addrs), maxAddresses)}
	}
	var errs field.ErrorList
	for i, a := range addrs {
		ap := path.Index(i).Child("address")
		if !addressTypes[a.Type] {
			errs = append(errs, field.NotSupported(path.Index(i).Child("type"), a.Type,
				[]string{"Hostname", "InternalIP", "ExternalIP"}))
		}
		switch {
		case len(a.Address) > 253:
			errs = append(errs, field.TooLong(ap, "", 253))
		case a.Address == "":
			errs = append(errs, field.Required(ap, "a host name or an IP address"))
		case a.Type != api.MachineHostName && net.ParseIP(a.Address) == nil:
			errs = append(errs, field.Invalid(ap, a.Address, "must be an IP address, e.g. 10.0.0.7 or fd00::7"))
		case strings.ContainsFunc(a.Address, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			errs = append(errs, field.Invalid(ap, a.Address, "must not contain spaces or control characters"))
		}
	}
	return errs
}

// hasControl reports whether s holds an ASCII control character (NUL,
// newline, tab, escape, DEL...): none belongs in a name, a path or a
// program, and they hide what a value really is when a person reads it.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// Status limits. An agent writes its Machine's and its MachinePlan's status
// with its own certificate, so every field it can write is bounded: without
// bounds one agent grew the datastore by 19 MB in 1.4 s (issue 13).
const (
	// maxStatusBytes bounds an agent-writable status, encoded as stored:
	// a plan's output (64 entries of 4 KiB) and probes fit with room.
	maxStatusBytes = 256 << 10
	// maxConditions bounds a status's conditions: each is one kind of
	// observation, and a machine has a handful.
	maxConditions = 16
	// maxConditionMessageBytes bounds a condition's message (apimachinery
	// allows 32 KiB, which 16 conditions would turn into 512 KiB).
	maxConditionMessageBytes = 4 << 10
	// maxMessageBytes and maxReasonBytes bound status.message and status.reason.
	maxMessageBytes = 4 << 10
	maxReasonBytes  = 1 << 10
)

// validateStatusSize refuses a status larger than maxStatusBytes encoded,
// unless unchangedBulk: the caller's word that the write left as stored
// every field that had no bound before this one (conditions, output...).
// A status stored before the bound existed must not stop the server from
// moving its object on (a Machine that could not be drained), and a write
// that changes only bounded fields cannot make it grow without bound.
func validateStatusSize(status interface{}, unchangedBulk bool, path *field.Path) field.ErrorList {
	b, err := json.Marshal(status)
	if err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	if len(b) <= maxStatusBytes || unchangedBulk {
		return nil
	}
	return field.ErrorList{field.Invalid(path, fmt.Sprintf("%d bytes", len(b)), fmt.Sprintf(
		"a status may be at most %d bytes (256 KiB) encoded: report less (conditions, messages, output)", maxStatusBytes))}
}

// validateConditions is apimachinery's check (type a qualified name,
// status True/False/Unknown, reason CamelCase, transition time set, no
// duplicate types) with muster's tighter bounds.
// Conditions the write leaves as stored are not checked again (ratcheting,
// as kube-apiserver does), for the same reason as validateStatusSize.
func validateConditions(conds, old []metav1.Condition, path *field.Path) field.ErrorList {
	if apiequality.Semantic.DeepEqual(conds, old) {
		return nil
	}
	if len(conds) > maxConditions {
		return field.ErrorList{field.TooMany(path, len(conds), maxConditions)}
	}
	errs := metav1validation.ValidateConditions(conds, path)
	for i, c := range conds {
		errs = append(errs, validateMaxLen(c.Message, maxConditionMessageBytes, path.Index(i).Child("message"))...)
	}
	return errs
}
