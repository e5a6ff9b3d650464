package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// This file makes dyad serve a drop-in for etcd's command line: kubeadm's
// generated etcd.yaml, etcd systemd units, ETCD_* environment variables and
// etcd's --config-file. Flags that mean something to dyad are dyad's own
// (serve.go, cluster.go); the rest are accepted here and named in one log
// line each at start-up, so nothing is silently dropped.

// ignoredFlag is an etcd flag that dyad accepts and has no use for.
type ignoredFlag struct {
	name   string
	isBool bool
	reason string
}

// ignoredEtcdFlags lists them. The first group is what kubeadm v1.36 puts
// in etcd's static pod (cmd/kubeadm/app/phases/etcd/local.go) beyond the
// flags dyad serves; the rest are common in etcd systemd units.
func ignoredEtcdFlags() []ignoredFlag {
	const (
		peers   = "dyad replicates over DDS on its own UDP ports; the peer's host comes from --initial-cluster"
		raft    = "dyad has no Raft: failure detection is --peer-lease and --ack-timeout"
		corrupt = "dyad has no Raft members to compare hashes with; its data file is checked when opened"
		logs    = "dyad logs to stderr (--log-level, --log-format)"
		tlsAuto = "dyad does not make self-signed certificates; use dyad certs"
	)
	return []ignoredFlag{
		{name: "listen-peer-urls", reason: peers},
		{name: "initial-advertise-peer-urls", reason: peers},
		{name: "peer-client-cert-auth", isBool: true, reason: "DDS Security always authenticates both peers (--peer-cert-file and the --dds-* files)"},
		{name: "snapshot-count", reason: "dyad has no Raft log snapshots; its replication log is bounded by --log-retention-bytes and --log-retention-age"},
		{name: "experimental-initial-corrupt-check", isBool: true, reason: corrupt},
		{name: "experimental-corrupt-check-time", reason: corrupt},
		{name: "corrupt-check-time", reason: corrupt},
		{name: "experimental-compact-hash-check-enabled", isBool: true, reason: corrupt},
		{name: "heartbeat-interval", reason: raft},
		{name: "election-timeout", reason: raft},
		{name: "pre-vote", isBool: true, reason: raft},
		{name: "strict-reconfig-check", isBool: true, reason: "a dyad pair's membership is fixed by --initial-cluster"},
		{name: "max-snapshots", reason: "dyad keeps no Raft snapshot files"},
		{name: "max-wals", reason: "dyad keeps no Raft WAL files"},
		{name: "wal-dir", reason: "dyad keeps everything under --data-dir"},
		{name: "enable-v2", isBool: true, reason: "dyad serves the v3 API only, as etcd 3.6 does"},
		{name: "logger", reason: logs},
		{name: "log-outputs", reason: logs},
		{name: "metrics", reason: "dyad always serves etcd's basic metrics on /metrics"},
		{name: "auto-tls", isBool: true, reason: tlsAuto},
		{name: "peer-auto-tls", isBool: true, reason: tlsAuto},
		{name: "cipher-suites", reason: "dyad uses Go's default TLS cipher suites"},
		{name: "tls-min-version", reason: "dyad accepts TLS 1.2 and newer"},
		{name: "tls-max-version", reason: "dyad accepts TLS 1.2 and newer"},
		{name: "auth-token", reason: "dyad identifies clients by TLS certificates, not tokens"},
		{name: "enable-grpc-gateway", isBool: true, reason: "dyad serves gRPC, not the JSON gateway"},
		{name: "grpc-keepalive-min-time", reason: "dyad's keepalive policy is fixed (5 s minimum)"},
		{name: "grpc-keepalive-interval", reason: "dyad's keepalive policy is fixed"},
		{name: "grpc-keepalive-timeout", reason: "dyad's keepalive policy is fixed"},
		{name: "experimental-enable-lease-checkpoint", isBool: true, reason: "dyad replicates every lease change and renews leases on promotion"},
		{name: "experimental-enable-lease-checkpoint-persist", isBool: true, reason: "dyad persists leases"},
	}
}

// featureGateReason is logged for each etcd feature gate given.
const featureGateReason = "etcd feature gates select Raft or bbolt behaviour dyad does not have"

// compatFlags are the etcd-only flags, registered on serve's flag set.
type compatFlags struct {
	ignored      []ignoredFlag
	featureGates string
	configFile   string
}

func (c *compatFlags) register(fl *pflag.FlagSet) {
	c.ignored = ignoredEtcdFlags()
	for _, f := range c.ignored {
		usage := "etcd compatibility: accepted and ignored (" + f.reason + ")."
		if f.isBool {
			fl.Bool(f.name, false, usage)
		} else {
			fl.String(f.name, "", usage)
		}
	}
	fl.StringVar(&c.featureGates, "feature-gates", "", "etcd compatibility: etcd's feature gates (\"InitialCorruptCheck=true,...\"), checked for form and ignored ("+featureGateReason+").")
	fl.StringVar(&c.configFile, "config-file", "", "YAML file in etcd's configuration format (flag names as keys, TLS under client-transport-security and peer-transport-security). As in etcd, when given, other flags and environment variables are ignored.")
}

// parseFeatureGates checks etcd's "Name=bool,..." form and returns the gates
// in order.
func parseFeatureGates(s string) ([]string, error) {
	var out []string
	err := eachNameValue(s, "Name=true or Name=false", func(name, val string) error {
		if _, err := strconv.ParseBool(val); err != nil {
			return fmt.Errorf("%q: %q is not a boolean", name+"="+val, val)
		}
		out = append(out, name+"="+val)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--feature-gates: %w", err)
	}
	return out, nil
}

// note is something to log once the logger exists (the logger's own flags
// may come from the environment or the config file).
type note struct {
	msg  string
	args []any
}

// ignoredNotes names every ignored flag that was set, and the feature gates.
func (c *compatFlags) ignoredNotes(fl *pflag.FlagSet) ([]note, error) {
	var out []note
	for _, f := range c.ignored {
		if fl.Changed(f.name) {
			out = append(out, note{"etcd flag accepted and ignored", []any{"flag", "--" + f.name, "value", fl.Lookup(f.name).Value.String(), "reason", f.reason}})
		}
	}
	gates, err := parseFeatureGates(c.featureGates)
	if err != nil {
		return nil, err
	}
	for _, g := range gates {
		out = append(out, note{"etcd feature gate accepted and ignored", []any{"gate", g, "reason", featureGateReason}})
	}
	return out, nil
}

// envKey is etcd's environment name of a flag without its prefix:
// listen-client-urls -> LISTEN_CLIENT_URLS.
func envKey(flag string) string { return strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }

// applyEnv sets every flag not given on the command line from DYAD_<FLAG>,
// else ETCD_<FLAG>, as etcd does for ETCD_<FLAG>: the command line wins
// over the environment. environ is os.Environ()'s form. It notes the
// variables a flag shadowed and the ETCD_* variables that name no flag.
func applyEnv(fl *pflag.FlagSet, environ []string) ([]note, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var out []note
	known := map[string]bool{}
	var err error
	fl.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Name == "help" {
			return
		}
		key := envKey(f.Name)
		known[key] = true
		setBy := "" // what gave the flag its value: the command line or a variable
		if f.Changed {
			setBy = "--" + f.Name
		}
		for _, prefix := range []string{"DYAD_", "ETCD_"} {
			v, ok := env[prefix+key]
			if !ok {
				continue
			}
			if setBy != "" {
				out = append(out, note{"environment variable shadowed", []any{"variable", prefix + key, "by", setBy}})
				continue
			}
			if serr := fl.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s%s=%q: %w", prefix, key, v, serr)
				return
			}
			setBy = prefix + key
		}
	})
	if err != nil {
		return nil, err
	}
	var unknown []string
	for k := range env {
		if rest, ok := strings.CutPrefix(k, "ETCD_"); ok && !known[rest] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		out = append(out, note{"environment variable names no flag; ignored", []any{"variable", k}})
	}
	return out, nil
}

// applyConfigFile sets flags from an etcd YAML configuration file. As in
// etcd, a configuration file replaces the command line: every other flag
// that was given goes back to its default (and is noted).
func applyConfigFile(fl *pflag.FlagSet, path string) ([]note, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config-file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("--config-file %s: %w", path, err)
	}
	var out []note
	var resetErr error
	fl.VisitAll(func(f *pflag.Flag) {
		if !f.Changed || f.Name == "config-file" || resetErr != nil {
			return
		}
		out = append(out, note{"flag ignored because --config-file is given", []any{"flag", "--" + f.Name}})
		if resetErr = fl.Set(f.Name, f.DefValue); resetErr == nil {
			f.Changed = false
		}
	})
	if resetErr != nil {
		return nil, resetErr
	}
	// etcd nests the TLS flags; the peer section's keys are the --peer-* flags.
	flat := map[string]any{}
	for k, v := range doc {
		sec, isSection := map[string]string{"client-transport-security": "", "peer-transport-security": "peer-"}[k]
		if !isSection {
			flat[k] = v
			continue
		}
		m, ok := v.(map[string]any)
		if !ok && v != nil {
			return nil, fmt.Errorf("--config-file %s: %s is not a mapping", path, k)
		}
		for sk, sv := range m {
			flat[sec+sk] = sv
		}
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fl.Lookup(k)
		if f == nil || k == "config-file" || k == "help" {
			out = append(out, note{"configuration key names no flag; ignored", []any{"key", k, "file", path}})
			continue
		}
		s, ok := yamlValue(flat[k], f.Value.Type())
		if !ok {
			continue // null or empty: the default stays, as in etcd
		}
		if err := fl.Set(k, s); err != nil {
			return nil, fmt.Errorf("--config-file %s: %s: %w", path, k, err)
		}
	}
	return out, nil
}

// yamlValue renders a decoded YAML value as flag text. Numbers given for a
// duration are nanoseconds, as etcd's configuration (Go's JSON form of
// time.Duration) has them; lists are joined with commas, as etcd's URL
// lists are written on the command line.
func yamlValue(v any, flagType string) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", false
	case string:
		return v, v != ""
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		if flagType == "duration" {
			return time.Duration(int64(v)).String(), true
		}
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := yamlValue(e, "string"); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, ","), len(parts) > 0
	}
	return fmt.Sprint(v), true
}

// configFilePath is --config-file, else DYAD_CONFIG_FILE, else
// ETCD_CONFIG_FILE (etcd reads its own from the environment too).
func configFilePath(flagValue string, getenv func(string) string) string {
	for _, p := range []string{flagValue, getenv("DYAD_CONFIG_FILE"), getenv("ETCD_CONFIG_FILE")} {
		if p != "" {
			return p
		}
	}
	return ""
}
