package validation

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/install"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Plan limits. A plan travels in one datastore row and to every watcher, so
// it stays small; large payloads belong on a file server the plan points at.
// The bounds below also refuse at admission what the agent could not carry
// out, so that a plan fails with a 422 naming the field, not on the
// machine with a reason that reaches only the agent's log.
const (
	maxPlanFileBytes = 64 << 10
	// maxPlanTotalBytes bounds all of a spec's strings together (file
	// contents, paths, commands, arguments, environment, URLs): with the
	// status bound (maxStatusBytes) it keeps a plan under the storage's
	// bound of an object (internal/registry's MaxObjectBytes).
	maxPlanTotalBytes = 512 << 10
	// maxPlanEntries bounds files, instructions and probes, each.
	maxPlanEntries    = 64
	maxTimeoutSeconds = 24 * 60 * 60
	// maxFileMode: permission bits only. The agent sets a file's mode with
	// os.FileMode(mode), in which 04000, 02000 and 01000 are not setuid,
	// setgid and sticky: 04755 used to be written 0755 and reported succeeded.
	maxFileMode = 0o777
	// maxPathBytes is Linux's PATH_MAX.
	maxPathBytes = 4096
	// maxPathElementBytes: the agent writes ".<name>.muster-<up to 10
	// digits>" beside the file and renames it, and that name must fit
	// Linux's NAME_MAX of 255 bytes.
	maxPathElementBytes = 255 - len("..muster-") - 10
	maxCommandBytes     = 4096
	// maxArgs and maxArgBytes stay well inside what exec accepts (128 KiB
	// per argument on Linux); a longer script belongs in a plan file.
	maxArgs     = 256
	maxArgBytes = 32 << 10
	maxEnv      = 64
	maxEnvBytes = 4 << 10
	maxURLBytes = 2048
	// maxEntryNameLen bounds instruction and probe names: they key the
	// output and probe lists of the status.
	maxEntryNameLen = 63
	// maxOutputBytes is what the agent keeps of an instruction's output
	// and of a probe's failure message (internal/agent truncates to it).
	maxOutputBytes = 4 << 10
)

// notUTF8 explains why a string must be UTF-8: objects travel as JSON, which
// replaces invalid bytes, so the agent would get something else than was
// written, and the plan another checksum. Only the server's own in-process
// writes can carry such a string: the API decoder already replaced them.
const notUTF8 = "must be valid UTF-8 text: objects travel as JSON, which would replace the invalid bytes"

// rootDirs are directories at the root of every Linux system: a plan
// file there would replace a directory, which the agent cannot do.
var rootDirs = []string{"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
	"/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var"}

// envName is a POSIX-ish environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateMachinePlan checks a MachinePlan's spec.
func ValidateMachinePlan(p *api.MachinePlan) field.ErrorList {
	return ValidateMachinePlanSpec(&p.Spec, field.NewPath("spec"))
}

// ValidateMachinePlanSpec checks a plan's spec at fldPath: a MachinePlan's
// own, or a template that becomes one (a plan set's spec.template and
// spec.drain.template, and the template it keeps in its status).
func ValidateMachinePlanSpec(s *api.MachinePlanSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	total := 0
	count := func(ss ...string) {
		for _, v := range ss {
			total += len(v)
		}
	}
	if len(s.Files) > maxPlanEntries {
		errs = append(errs, field.TooMany(fldPath.Child("files"), len(s.Files), maxPlanEntries))
	}
	seen := map[string]bool{}
	for i, f := range s.Files {
		fp := fldPath.Child("files").Index(i)
		if pathErrs := validatePlanPath(f.Path, fp.Child("path")); len(pathErrs) > 0 {
			errs = append(errs, pathErrs...)
		} else if seen[f.Path] {
			errs = append(errs, field.Duplicate(fp.Child("path"), f.Path))
		}
		seen[f.Path] = true
		if len(f.Content) > maxPlanFileBytes {
			errs = append(errs, field.TooLong(fp.Child("content"), "", maxPlanFileBytes))
		} else if !utf8.ValidString(f.Content) {
			errs = append(errs, field.Invalid(fp.Child("content"), "<content>", notUTF8+
				"; for a binary file, carry it base64-encoded and decode it with an instruction"))
		}
		count(f.Path, f.Content)
		if f.Mode < 0 || f.Mode > maxFileMode {
			errs = append(errs, field.Invalid(fp.Child("mode"), fmt.Sprintf("%#o", f.Mode),
				"must be permission bits between 0 and 0777 (511 in decimal): setuid, setgid and sticky bits "+
					"(04000, 02000, 01000) are refused because the agent writes permission bits only; "+
					"set them with an instruction (chmod) if the file needs them"))
		}
		if f.Delete && f.Content != "" {
			errs = append(errs, field.Invalid(fp.Child("content"), "<content>", "must be empty when delete is true"))
		}
	}
	errs = append(errs, validateFileNesting(s.Files, fldPath.Child("files"))...)
	if len(s.Instructions) > maxPlanEntries {
		errs = append(errs, field.TooMany(fldPath.Child("instructions"), len(s.Instructions), maxPlanEntries))
	}
	names := map[string]bool{}
	for i, in := range s.Instructions {
		ip := fldPath.Child("instructions").Index(i)
		errs = append(errs, validateEntryName(in.Name, names, ip.Child("name"))...)
		errs = append(errs, validateCommand(in.Command, ip.Child("command"))...)
		errs = append(errs, validateArgs(in.Args, ip.Child("args"))...)
		errs = append(errs, validateEnv(in.Env, ip.Child("env"))...)
		errs = append(errs, validateTimeout(in.TimeoutSeconds, ip.Child("timeoutSeconds"))...)
		count(in.Command)
		count(in.Args...)
		count(in.Env...)
	}
	if len(s.Probes) > maxPlanEntries {
		errs = append(errs, field.TooMany(fldPath.Child("probes"), len(s.Probes), maxPlanEntries))
	}
	probeNames := map[string]bool{}
	for i, pr := range s.Probes {
		pp := fldPath.Child("probes").Index(i)
		errs = append(errs, validateEntryName(pr.Name, probeNames, pp.Child("name"))...)
		switch {
		case pr.HTTPGet == nil && pr.Exec == nil:
			errs = append(errs, field.Required(pp, "exactly one probe type: httpGet or exec"))
		case pr.HTTPGet != nil && pr.Exec != nil:
			errs = append(errs, field.Forbidden(pp, "exactly one probe type may be set: httpGet or exec, not both"))
		case pr.HTTPGet != nil:
			count(pr.HTTPGet.URL)
			if len(pr.HTTPGet.URL) > maxURLBytes {
				errs = append(errs, field.TooLong(pp.Child("httpGet", "url"), "", maxURLBytes))
			} else if !utf8.ValidString(pr.HTTPGet.URL) {
				// JSON would store U+FFFD in place of the bad bytes: the
				// plan would not be the one that was validated.
				errs = append(errs, field.Invalid(pp.Child("httpGet", "url"), field.OmitValueType{}, "must be valid UTF-8; percent-encode other bytes (%AD)"))
			} else if u, err := url.Parse(pr.HTTPGet.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, field.Invalid(pp.Child("httpGet", "url"), field.OmitValueType{}, "must be an http:// or https:// URL"))
			}
		case pr.Exec != nil:
			errs = append(errs, validateCommand(pr.Exec.Command, pp.Child("exec", "command"))...)
			errs = append(errs, validateArgs(pr.Exec.Args, pp.Child("exec", "args"))...)
			count(pr.Exec.Command)
			count(pr.Exec.Args...)
		}
		errs = append(errs, validateTimeout(pr.TimeoutSeconds, pp.Child("timeoutSeconds"))...)
		errs = append(errs, validateTimeout(pr.PeriodSeconds, pp.Child("periodSeconds"))...)
		errs = append(errs, validateNonNegative(pr.SuccessThreshold, pp.Child("successThreshold"))...)
		errs = append(errs, validateNonNegative(pr.FailureThreshold, pp.Child("failureThreshold"))...)
	}
	if total > maxPlanTotalBytes {
		errs = append(errs, field.Invalid(fldPath, fmt.Sprintf("%d bytes", total), fmt.Sprintf(
			"file contents, paths, commands, arguments, environment and URLs together may be at most %d bytes (512 KiB): "+
				"let the plan download large files instead", maxPlanTotalBytes)))
	}
	errs = append(errs, validateAgentUpgrade(s.AgentUpgrade, fldPath.Child("agentUpgrade"))...)
	errs = append(errs, validateNotRedacted(s, fldPath)...)
	return append(errs, validateNonNegative(s.MaxFailures, fldPath.Child("maxFailures"))...)
}

// hexSHA256 is a SHA-256 in lower- or upper-case hex.
var hexSHA256 = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// sha256sumLine is a line of sha256sum's output: the hash, then a name.
var sha256sumLine = regexp.MustCompile(`^[0-9a-fA-F]{64}\s+\*?\S`)

// sha256Hint says where an agent binary's SHA-256 is read, alone.
const sha256Hint = "kubectl get --raw /assets/agent/<version>/muster-agent-<os>-<arch>.sha256 | cut -d' ' -f1"

// ValidAgentVersion reports whether v may name an agent binary: 1-64 of
// letters, digits, '.', '_', '+', '-', not starting with a punctuation mark
// (so never "." or "..").
// It is the check the server's /assets/agent/<version>/ applies, so that a
// valid plan names a binary the server can serve.
func ValidAgentVersion(v string) bool { return install.ValidVersion(v) }

func validateAgentUpgrade(u *api.AgentUpgrade, fld *field.Path) field.ErrorList {
	if u == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case u.Version == "":
		errs = append(errs, field.Required(fld.Child("version"), "the agent version to install, as named in the server's --agent-binaries-dir (muster-agent-<version>-<os>-<arch>)"))
	case !ValidAgentVersion(u.Version):
		errs = append(errs, field.Invalid(fld.Child("version"), u.Version,
			"must be 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"))
	}
	if u.Sha256 == "" && len(u.Platforms) == 0 {
		errs = append(errs, field.Required(fld.Child("sha256"), "the binary's SHA-256 in hex: "+sha256Hint+
			" (for a fleet of several architectures, give platforms: [{platform: linux/arm64, sha256: ...}, ...] instead)"))
	} else if u.Sha256 != "" {
		errs = append(errs, validateSHA256(u.Sha256, fld.Child("sha256"))...)
	}
	seen := map[string]bool{}
	for i, p := range u.Platforms {
		pf := fld.Child("platforms").Index(i)
		switch {
		case !agentPlatform.MatchString(p.Platform):
			errs = append(errs, field.Invalid(pf.Child("platform"), p.Platform,
				"must be <os>/<arch> as Go names them, e.g. linux/amd64, linux/arm64 or linux/arm (the ARMv7 build): the binary muster-agent-<os>-<arch>"))
		case seen[p.Platform]:
			errs = append(errs, field.Duplicate(pf.Child("platform"), p.Platform))
		}
		seen[p.Platform] = true
		if p.Sha256 == "" {
			errs = append(errs, field.Required(pf.Child("sha256"), "the SHA-256 of that platform's binary: "+sha256Hint))
		} else {
			errs = append(errs, validateSHA256(p.Sha256, pf.Child("sha256"))...)
		}
	}
	return append(errs, validateTimeout(u.TimeoutSeconds, fld.Child("timeoutSeconds"))...)
}

// agentPlatform is <os>/<arch>, each a lower-case word as Go names them.
var agentPlatform = regexp.MustCompile(`^[a-z0-9]{1,16}/[a-z0-9]{1,16}$`)

func validateSHA256(sum string, fld *field.Path) field.ErrorList {
	switch {
	case sha256sumLine.MatchString(sum):
		// The server publishes <binary>.sha256 as sha256sum does; pasted
		// whole, it carries the file name.
		return field.ErrorList{field.Invalid(fld, sum,
			"is a .sha256 file's whole line (<hash>  <name>): give only its first field, the 64 hex digits: "+sha256Hint)}
	case !hexSHA256.MatchString(sum):
		return field.ErrorList{field.Invalid(fld, sum, "must be a SHA-256 as 64 hex digits")}
	}
	return nil
}

// validatePlanPath accepts an absolute, clean path to a file the agent can
// write by creating a temporary file beside it and renaming it into place.
func validatePlanPath(p string, fld *field.Path) field.ErrorList {
	switch {
	case p == "":
		return field.ErrorList{field.Required(fld, "an absolute path such as /etc/muster/config.yaml")}
	case len(p) > maxPathBytes:
		return field.ErrorList{field.TooLong(fld, "", maxPathBytes)}
	case strings.IndexByte(p, 0) >= 0:
		return field.ErrorList{field.Invalid(fld, p, "must not contain a NUL byte: no file system accepts it in a path")}
	case hasControl(p):
		return field.ErrorList{field.Invalid(fld, p, "must not contain control characters (newline, tab, escape...)")}
	case !utf8.ValidString(p):
		return field.ErrorList{field.Invalid(fld, p, notUTF8)}
	case !path.IsAbs(p) || path.Clean(p) != p:
		return field.ErrorList{field.Invalid(fld, p,
			"must be an absolute, clean path (no relative parts, no '..', no trailing '/')")}
	case p == "/":
		return field.ErrorList{field.Invalid(fld, p, "must name a file, not the root directory: e.g. /etc/muster/config.yaml")}
	case slices.Contains(rootDirs, p):
		return field.ErrorList{field.Invalid(fld, p,
			"names a directory every Linux system has, which the agent cannot replace with a file: name a file inside it, e.g. "+p+"/muster.conf")}
	case strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/"):
		return field.ErrorList{field.Invalid(fld, p,
			"is on /proc or /sys, where the agent cannot create the temporary file it renames into place: "+
				"change kernel settings with an instruction instead (e.g. sysctl -w, or a file in /etc/sysctl.d)")}
	}
	for _, elem := range strings.Split(p[1:], "/") {
		if len(elem) > maxPathElementBytes {
			return field.ErrorList{field.Invalid(fld, p, fmt.Sprintf(
				"has a path element of %d bytes; at most %d are allowed, so that the agent's temporary file beside it fits the 255-byte limit of file names",
				len(elem), maxPathElementBytes))}
		}
	}
	return nil
}

// validateFileNesting refuses a file inside another file the same plan
// writes: the agent would have to make a directory where it wrote a file.
func validateFileNesting(files []api.PlanFile, fld *field.Path) field.ErrorList {
	written := map[string]bool{}
	for _, f := range files {
		if !f.Delete {
			written[f.Path] = true
		}
	}
	var errs field.ErrorList
	for i, f := range files {
		for dir := path.Dir(f.Path); len(written) > 1 && dir != "/" && dir != "."; dir = path.Dir(dir) {
			if written[dir] {
				errs = append(errs, field.Invalid(fld.Index(i).Child("path"), f.Path,
					fmt.Sprintf("is inside %s, which this plan writes as a file: a path cannot be both a file and a directory", dir)))
				break
			}
		}
	}
	return errs
}

// validateCommand accepts a program as exec runs it: an absolute path, or
// a name looked up on the agent's PATH.
func validateCommand(cmd string, fld *field.Path) field.ErrorList {
	switch {
	case cmd == "":
		return field.ErrorList{field.Required(fld, "the program to run, e.g. /usr/bin/systemctl or systemctl")}
	case len(cmd) > maxCommandBytes:
		return field.ErrorList{field.TooLong(fld, "", maxCommandBytes)}
	case hasControl(cmd):
		return field.ErrorList{field.Invalid(fld, cmd, "must not contain NUL bytes or other control characters; arguments go in args")}
	case !utf8.ValidString(cmd):
		return field.ErrorList{field.Invalid(fld, cmd, notUTF8)}
	case strings.Contains(cmd, "/") && !path.IsAbs(cmd):
		return field.ErrorList{field.Invalid(fld, cmd,
			"must be an absolute path (e.g. /usr/bin/systemctl) or a program name looked up on the agent's PATH (e.g. systemctl): "+
				"a relative path would depend on the agent's working directory")}
	}
	return nil
}

// validateArgs and validateEnv never quote the value they refuse: it may
// be a secret, and an error may reach a log (a controller's failed write).
func validateArgs(args []string, fld *field.Path) field.ErrorList {
	if len(args) > maxArgs {
		return field.ErrorList{field.TooMany(fld, len(args), maxArgs)}
	}
	var errs field.ErrorList
	for i, a := range args {
		switch {
		case len(a) > maxArgBytes:
			errs = append(errs, field.TooLong(fld.Index(i), "", maxArgBytes))
		case strings.IndexByte(a, 0) >= 0:
			errs = append(errs, field.Invalid(fld.Index(i), field.OmitValueType{},
				"must not contain a NUL byte: a program's arguments end at the first one, so the agent cannot pass it"))
		case !utf8.ValidString(a):
			errs = append(errs, field.Invalid(fld.Index(i), field.OmitValueType{}, notUTF8))
		}
	}
	return errs
}

func validateEnv(env []string, fld *field.Path) field.ErrorList {
	if len(env) > maxEnv {
		return field.ErrorList{field.TooMany(fld, len(env), maxEnv)}
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, e := range env {
		name, _, ok := strings.Cut(e, "=")
		switch {
		case len(e) > maxEnvBytes:
			errs = append(errs, field.TooLong(fld.Index(i), "", maxEnvBytes))
		case !ok || !envName.MatchString(name):
			errs = append(errs, field.Invalid(fld.Index(i), field.OmitValueType{},
				`must be "NAME=value" where NAME is letters, digits and '_' and does not start with a digit`))
		case strings.IndexByte(e, 0) >= 0:
			errs = append(errs, field.Invalid(fld.Index(i), field.OmitValueType{},
				"must not contain a NUL byte: the environment is NUL-separated, so the agent cannot pass it"))
		case !utf8.ValidString(e):
			errs = append(errs, field.Invalid(fld.Index(i), field.OmitValueType{}, notUTF8))
		case seen[name]:
			errs = append(errs, field.Duplicate(fld.Index(i), name))
		}
		seen[name] = true
	}
	return errs
}
func validateEntryName(name string, seen map[string]bool, path *field.Path) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(path, "names the entry in reported status")}
	case len(name) > maxEntryNameLen:
		return field.ErrorList{field.TooLong(path, "", maxEntryNameLen)}
	case hasControl(name):
		return field.ErrorList{field.Invalid(path, name, "must not contain NUL bytes or other control characters")}
	case !utf8.ValidString(name):
		return field.ErrorList{field.Invalid(path, name, notUTF8)}
	case seen[name]:
		return field.ErrorList{field.Duplicate(path, name)}
	}
	seen[name] = true
	return nil
}

func validateTimeout(seconds int32, path *field.Path) field.ErrorList {
	if seconds < 0 || seconds > maxTimeoutSeconds {
		return field.ErrorList{field.Invalid(path, seconds, fmt.Sprintf("must be between 0 (default) and %d", maxTimeoutSeconds))}
	}
	return nil
}

// ValidateMachinePlanStatusUpdate bounds what an agent reports of its plan.
func ValidateMachinePlanStatusUpdate(p, old *api.MachinePlan) field.ErrorList {
	status := field.NewPath("status")
	// First the size: it bounds the work below, and keeps a huge value out
	// of the error message.
	// Output and probes had no count bound before; the others are small.
	unchangedBulk := apiequality.Semantic.DeepEqual(p.Status.Output, old.Status.Output) &&
		apiequality.Semantic.DeepEqual(p.Status.Probes, old.Status.Probes)
	if errs := validateStatusSize(p.Status, unchangedBulk, status); len(errs) > 0 {
		return errs
	}
	var errs field.ErrorList
	if !planStates[p.Status.State] {
		errs = append(errs, field.NotSupported(status.Child("state"), p.Status.State,
			[]string{"pending", "in-progress", "succeeded", "failed"}))
	}
	// Checked when written, so that a value stored before this check does
	// not block the agent's next report, which carries it over.
	if p.Status.Checksum != old.Status.Checksum {
		errs = append(errs, validateChecksum(p.Status.Checksum, status.Child("checksum"))...)
	}
	if p.Status.AppliedChecksum != old.Status.AppliedChecksum {
		errs = append(errs, validateChecksum(p.Status.AppliedChecksum, status.Child("appliedChecksum"))...)
	}
	errs = append(errs, validateNonNegative(p.Status.FailureCount, status.Child("failureCount"))...)
	// Output and probes the report carries over unchanged were checked
	// when written, or predate the checks (see validateStatusSize).
	if !apiequality.Semantic.DeepEqual(p.Status.Output, old.Status.Output) {
		errs = append(errs, validateOutputs(p.Status.Output, status.Child("output"))...)
	}
	if !apiequality.Semantic.DeepEqual(p.Status.Probes, old.Status.Probes) {
		errs = append(errs, validateProbeStatuses(p.Status.Probes, status.Child("probes"))...)
	}
	return errs
}

func validateOutputs(outputs []api.InstructionOutput, path *field.Path) field.ErrorList {
	if len(outputs) > maxPlanEntries {
		return field.ErrorList{field.TooMany(path, len(outputs), maxPlanEntries)}
	}
	var errs field.ErrorList
	names := map[string]bool{}
	for i, o := range outputs {
		errs = append(errs, validateReportedName(o.Name, names, path.Index(i).Child("name"))...)
		errs = append(errs, validateMaxLen(o.Output, maxOutputBytes, path.Index(i).Child("output"))...)
	}
	return errs
}

func validateProbeStatuses(probes []api.ProbeStatus, path *field.Path) field.ErrorList {
	if len(probes) > maxPlanEntries {
		return field.ErrorList{field.TooMany(path, len(probes), maxPlanEntries)}
	}
	var errs field.ErrorList
	names := map[string]bool{}
	for i, pr := range probes {
		errs = append(errs, validateReportedName(pr.Name, names, path.Index(i).Child("name"))...)
		errs = append(errs, validateMaxLen(pr.Message, maxOutputBytes, path.Index(i).Child("message"))...)
	}
	return errs
}

// validateReportedName checks the name of a status entry, which the agent
// copies from the spec: present, unique and bounded, without the spec's
// character rules, so that a plan stored before them can still report.
func validateReportedName(name string, seen map[string]bool, fld *field.Path) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(fld, "the name of the spec's instruction or probe")}
	case len(name) > maxEntryNameLen:
		return field.ErrorList{field.TooLong(fld, "", maxEntryNameLen)}
	case seen[name]:
		return field.ErrorList{field.Duplicate(fld, name)}
	}
	seen[name] = true
	return nil
}

var checksumPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// validateChecksum accepts a plan checksum (PlanChecksum: 64 lowercase hex
// digits) or nothing.
func validateChecksum(sum string, fld *field.Path) field.ErrorList {
	if sum == "" || checksumPattern.MatchString(sum) {
		return nil
	}
	if len(sum) > 64 {
		return field.ErrorList{field.TooLong(fld, "", 64)}
	}
	return field.ErrorList{field.Invalid(fld, sum, "must be empty or a plan checksum: 64 lowercase hex digits (SHA-256)")}
}

// validateNotRedacted refuses a spec that carries the marker back where a
// secret was: a plan read redacted and written back (kubectl edit, a
// client-side apply from a redacted copy) would otherwise replace the
// secret with the marker on the machine.
func validateNotRedacted(s *api.MachinePlanSpec, fld *field.Path) field.ErrorList {
	const why = `is what a caller who may not read the plan's secrets reads in place of a secret (` + api.Redacted + `): ` +
		`write the real value, as someone allowed ` + api.SecretsSubresource + ` (an operator) reads it`
	var errs field.ErrorList
	carries := func(v string) bool { return v == api.Redacted }
	for i, f := range s.Files {
		if carries(f.Content) {
			errs = append(errs, field.Invalid(fld.Child("files").Index(i).Child("content"), api.Redacted, why))
		}
	}
	for i, in := range s.Instructions {
		ip := fld.Child("instructions").Index(i)
		for j, a := range in.Args {
			if carries(a) {
				errs = append(errs, field.Invalid(ip.Child("args").Index(j), api.Redacted, why))
			}
		}
		for j, e := range in.Env {
			if _, value, _ := strings.Cut(e, "="); carries(e) || carries(value) {
				errs = append(errs, field.Invalid(ip.Child("env").Index(j), api.Redacted, why))
			}
		}
	}
	for i, p := range s.Probes {
		pp := fld.Child("probes").Index(i)
		if p.Exec != nil {
			for j, a := range p.Exec.Args {
				if carries(a) {
					errs = append(errs, field.Invalid(pp.Child("exec", "args").Index(j), api.Redacted, why))
				}
			}
		}
		// A URL is redacted in parts (user info, query), so the marker is
		// looked for inside it, as written or percent-encoded.
		if p.HTTPGet != nil && (strings.Contains(p.HTTPGet.URL, api.Redacted) || strings.Contains(p.HTTPGet.URL, url.QueryEscape(api.Redacted))) {
			errs = append(errs, field.Invalid(pp.Child("httpGet", "url"), api.Redacted, why))
		}
	}
	return errs
}
