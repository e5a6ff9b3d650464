package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/conflict"
)

// resolveCmd works on the conflict records a node keeps after losing a
// split brain: the writes it acknowledged alone that the winning history
// does not have.
func resolveCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Inspect and re-apply the writes a node kept as conflict records after a split brain",
		Long: `After a split brain in which both zones acknowledged writes alone, the
preferred zone's history wins. The other node never re-applies its diverged
writes by itself: it keeps them in <data-dir>/conflicts, one set per split
brain, with the final state of every key they changed and every diverged
request. resolve works on those sets:

  dyad resolve list    --data-dir DIR              the sets, with what is still open
  dyad resolve show    --data-dir DIR [SET]        the keys (and --entries: the requests)
  dyad resolve apply   --data-dir DIR [SET] --endpoints HOST:PORT (--all | --key K | --prefix P)
                                                   write the loser's final state of those keys
                                                   to the pair, as new revisions
  dyad resolve dismiss --data-dir DIR [SET] (--all | --key K | --prefix P)
                                                   mark keys as handled without writing them
  dyad resolve accept  --data-dir DIR [SET]        with --split-brain-policy manual: let the
                                                   held-back node give up its diverged history
                                                   (it stays in the set) and rejoin

SET is a file name from "list"; the newest set is the default. The files are
read while the node runs. See docs/OPERATIONS.md (split brain).`,
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "", "Data directory of the node that kept the conflict records.")
	cmd.AddCommand(resolveListCmd(&dataDir), resolveShowCmd(&dataDir), resolveApplyCmd(&dataDir), resolveDismissCmd(&dataDir), resolveAcceptCmd(&dataDir))
	return cmd
}

// pickSet returns the path of the set named in args, or of the newest one.
func pickSet(dataDir string, args []string) (string, error) {
	if dataDir == "" {
		return "", errors.New("--data-dir is required")
	}
	dir := conflict.Dir(dataDir)
	if len(args) == 1 {
		p := filepath.Join(dir, filepath.Base(args[0]))
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("no conflict set %s: %w", args[0], err)
		}
		return p, nil
	}
	paths, err := conflict.List(dir)
	if err != nil {
		return "", err
	}
	if len(paths) == 0 {
		return "", fmt.Errorf("%s holds no conflict records", dataDir)
	}
	return paths[len(paths)-1], nil
}

func resolveListCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the conflict sets of a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if *dataDir == "" {
				return errors.New("--data-dir is required")
			}
			paths, err := conflict.List(conflict.Dir(*dataDir))
			if err != nil {
				return err
			}
			out := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(out, "SET\tCREATED\tWINNER\tENTRIES\tKEYS\tOPEN\tACCEPTED\tNOTE")
			for _, p := range paths {
				s, err := conflict.Load(p)
				if err != nil {
					return err
				}
				done, err := conflict.Resolved(p)
				if err != nil {
					return err
				}
				open := 0
				for _, k := range s.Keys {
					if _, ok := done[string(k.Key)]; !ok {
						open++
					}
				}
				note := ""
				if s.Incomplete != "" {
					note = "incomplete (see show)"
				}
				fmt.Fprintf(out, "%s\t%s\t%s\t%d\t%d\t%d\t%v\t%s\n", filepath.Base(p), s.Created.Format(time.RFC3339), s.Winner,
					len(s.Entries), len(s.Keys), open, conflict.Accepted(p), note)
			}
			return out.Flush()
		},
	}
}

func resolveShowCmd(dataDir *string) *cobra.Command {
	var entries, values bool
	cmd := &cobra.Command{
		Use:   "show [SET]",
		Short: "Show the keys (and requests) of a conflict set",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pickSet(*dataDir, args)
			if err != nil {
				return err
			}
			s, err := conflict.Load(p)
			if err != nil {
				return err
			}
			done, err := conflict.Resolved(p)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "set %s: member %s lost to %s; diverged after log index %d (revision %d); loser reached revision %d\n",
				filepath.Base(p), s.Member, s.Winner, s.DivergedAt, s.BaseRevision, s.LoserRevision)
			if s.Incomplete != "" {
				fmt.Fprintf(w, "incomplete: %s\n", s.Incomplete)
			}
			out := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			fmt.Fprintln(out, "KEY\tLOSER'S STATE\tMOD REVISION\tRESOLUTION")
			for _, k := range s.Keys {
				state := fmt.Sprintf("put, %d bytes", len(k.Value))
				if values {
					state = "put " + strconv.Quote(string(k.Value))
				}
				if k.Deleted {
					state = "deleted"
				}
				res := "open"
				if d, ok := done[string(k.Key)]; ok {
					res = d.Action
				}
				fmt.Fprintf(out, "%s\t%s\t%d\t%s\n", strconv.Quote(string(k.Key)), state, k.ModRevision, res)
			}
			out.Flush()
			if entries {
				out = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
				fmt.Fprintln(out, "INDEX\tEPOCH\tTIME\tREVISION\tREQUEST")
				for _, e := range s.Entries {
					fmt.Fprintf(out, "%d\t%s\t%s\t%d\t%s\n", e.Index, e.Epoch, e.Time.Format(time.RFC3339Nano), e.Revision, e.Summary)
				}
				out.Flush()
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&entries, "entries", false, "Also list every diverged request, in log order.")
	cmd.Flags().BoolVar(&values, "values", false, "Print values (quoted) instead of their sizes.")
	return cmd
}

// keySelection is --all / --key / --prefix.
type keySelection struct {
	all      bool
	keys     []string
	prefixes []string
}

func (k *keySelection) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&k.all, "all", false, "Every open key of the set.")
	cmd.Flags().StringArrayVar(&k.keys, "key", nil, "A key (repeatable).")
	cmd.Flags().StringArrayVar(&k.prefixes, "prefix", nil, "Every open key with this prefix (repeatable).")
}

// pick returns the open keys of s that the selection names.
func (k *keySelection) pick(s *conflict.Set, done map[string]conflict.Resolution) ([]conflict.Key, error) {
	if !k.all && len(k.keys) == 0 && len(k.prefixes) == 0 {
		return nil, errors.New("name the keys: --all, --key or --prefix")
	}
	want := map[string]bool{}
	for _, key := range k.keys {
		want[key] = true
	}
	var out []conflict.Key
	for _, c := range s.Keys {
		key := string(c.Key)
		if _, ok := done[key]; ok {
			continue
		}
		sel := k.all || want[key]
		for _, p := range k.prefixes {
			sel = sel || strings.HasPrefix(key, p)
		}
		if sel {
			out = append(out, c)
		}
	}
	return out, nil
}

func resolveApplyCmd(dataDir *string) *cobra.Command {
	var sel keySelection
	var endpoints, cacert, cert, key string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply [SET]",
		Short: "Write the loser's final state of chosen keys to the pair",
		Long: `apply writes, for every chosen key that is still open, the losing node's
final state to the pair through the etcd API: a put of its value (without a
lease: the loser's leases did not survive), or a delete. They are new
writes with new revisions, so watchers see them. Each key is then recorded
as applied and is not offered again.

Check first, with "show --values", that the loser's state is what you want:
the winner may have changed the same key while the zones were apart.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, chosen, err := loadSelection(*dataDir, args, &sel)
			if err != nil {
				return err
			}
			if dryRun {
				for _, k := range chosen {
					fmt.Fprintf(cmd.OutOrStdout(), "would %s\n", describe(k))
				}
				return nil
			}
			cli, err := resolveClient(endpoints, cacert, cert, key)
			if err != nil {
				return err
			}
			defer cli.Close()
			return applyKeys(cmd.Context(), cmd.OutOrStdout(), cli, p, chosen)
		},
	}
	sel.register(cmd)
	cmd.Flags().StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "Comma-separated client endpoints of the pair.")
	cmd.Flags().StringVar(&cacert, "cacert", "", "CA bundle to verify the servers' certificates (TLS).")
	cmd.Flags().StringVar(&cert, "cert", "", "Client certificate (mutual TLS).")
	cmd.Flags().StringVar(&key, "key-file", "", "Client certificate's key (mutual TLS).")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Print what would be written, write nothing.")
	return cmd
}

// loadSelection returns the chosen set's path and its selected open keys.
func loadSelection(dataDir string, args []string, sel *keySelection) (string, []conflict.Key, error) {
	p, err := pickSet(dataDir, args)
	if err != nil {
		return "", nil, err
	}
	s, err := conflict.Load(p)
	if err != nil {
		return "", nil, err
	}
	done, err := conflict.Resolved(p)
	if err != nil {
		return "", nil, err
	}
	chosen, err := sel.pick(s, done)
	return p, chosen, err
}

func describe(k conflict.Key) string {
	if k.Deleted {
		return "delete " + strconv.Quote(string(k.Key))
	}
	return fmt.Sprintf("put %s (%d bytes)", strconv.Quote(string(k.Key)), len(k.Value))
}

// applyKeys writes each key's final state and records it, one at a time,
// so an interrupted run resumes where it stopped.
func applyKeys(ctx context.Context, w io.Writer, cli *clientv3.Client, setPath string, keys []conflict.Key) error {
	for _, k := range keys {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var rev int64
		var err error
		if k.Deleted {
			var r *clientv3.DeleteResponse
			if r, err = cli.Delete(octx, string(k.Key)); err == nil {
				rev = r.Header.Revision
			}
		} else {
			var r *clientv3.PutResponse
			if r, err = cli.Put(octx, string(k.Key), string(k.Value)); err == nil {
				rev = r.Header.Revision
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", describe(k), err)
		}
		if err := conflict.Record(setPath, conflict.Resolution{Key: k.Key, Action: "applied", At: time.Now().UTC(), Revision: rev}); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s at revision %d\n", describe(k), rev)
	}
	fmt.Fprintf(w, "%d key(s) applied\n", len(keys))
	return nil
}

func resolveClient(endpoints, cacert, cert, key string) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if cacert != "" || cert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cacert != "" {
			pem, err := os.ReadFile(cacert)
			if err != nil {
				return nil, err
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--cacert %s holds no certificate", cacert)
			}
		}
		if cert != "" {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, err
			}
			tc.Certificates = []tls.Certificate{c}
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

func resolveDismissCmd(dataDir *string) *cobra.Command {
	var sel keySelection
	cmd := &cobra.Command{
		Use:   "dismiss [SET]",
		Short: "Mark chosen keys as handled without writing them",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, chosen, err := loadSelection(*dataDir, args, &sel)
			if err != nil {
				return err
			}
			for _, k := range chosen {
				if err := conflict.Record(p, conflict.Resolution{Key: k.Key, Action: "dismissed", At: time.Now().UTC()}); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d key(s) dismissed\n", len(chosen))
			return nil
		},
	}
	sel.register(cmd)
	return cmd
}

func resolveAcceptCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "accept [SET]",
		Short: "Let a node held back by --split-brain-policy manual rejoin, keeping its diverged writes as conflict records",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pickSet(*dataDir, args)
			if err != nil {
				return err
			}
			if err := conflict.Accept(p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s accepted: the node gives up its diverged history within a second and rejoins as the replica\n", filepath.Base(p))
			return nil
		},
	}
}
