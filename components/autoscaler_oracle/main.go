// Command nra-autoscaler-oracle answers, for a dump of a cluster, what the cluster-autoscaler's own packages compute
// for each node: the utilization (simulator/utilization.Calculate), whether the node is underutilized, the
// scale-down-disabled annotation, the GPU configuration, and the default drainability rules pod by pod. It is
// compiled inside the autoscaler's source tree (components/autoscaler.py), so every answer comes from that release's
// code; the release-specific calls live in the adapter files (v1_36/, v1_31/) copied beside this one.
//
//	nra-autoscaler-oracle --version
//	nra-autoscaler-oracle [autoscaler flags] --now RFC3339 [dump.json]      one JSON answer (default: stdin)
//	nra-autoscaler-oracle --lines                                            one request per line, one answer per line
//
// A request in line mode is {"dump": <List>, "flags": ["--name=value", ...], "now": "RFC 3339"}.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"k8s.io/autoscaler/cluster-autoscaler/version"
)

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println(version.ClusterAutoscalerVersion)
		return
	}
	if len(args) == 1 && args[0] == "--lines" {
		if err := serveLines(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "nra-autoscaler-oracle:", err)
			os.Exit(1)
		}
		return
	}
	var now string
	fs := flag.NewFlagSet("nra-autoscaler-oracle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&now, "now", "", "the moment to judge at (RFC 3339)")
	opts := registerFlags(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "nra-autoscaler-oracle: usage: nra-autoscaler-oracle [--version | --lines | "+
			"[autoscaler flags] --now RFC3339 [DUMP.json, default standard input]]", err)
		os.Exit(2)
	}
	var dump []byte
	var err error
	if fs.NArg() == 1 {
		dump, err = os.ReadFile(fs.Arg(0))
	} else {
		dump, err = io.ReadAll(os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nra-autoscaler-oracle:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(judgeRequest(dump, opts, now))
	fmt.Println(string(out))
}

// request is one line of --lines.
type request struct {
	Dump  json.RawMessage `json:"dump"`
	Flags []string        `json:"flags"`
	Now   string          `json:"now"`
}

func serveLines(in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 1<<30)
	writer := bufio.NewWriter(out)
	for scanner.Scan() {
		var answer answer
		var req request
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			answer = answer_(fmt.Errorf("request: %w", err))
		} else {
			fs := flag.NewFlagSet("flags", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts := registerFlags(fs)
			if err := fs.Parse(req.Flags); err != nil {
				answer = answer_(fmt.Errorf("flags: %w", err))
			} else if fs.NArg() > 0 {
				answer = answer_(fmt.Errorf("flags: unexpected argument %q", fs.Arg(0)))
			} else {
				answer = judgeRequest(req.Dump, opts, req.Now)
			}
		}
		line, err := json.Marshal(answer)
		if err != nil {
			line, _ = json.Marshal(answer_(err))
		}
		writer.Write(line)
		writer.WriteByte('\n')
		if err := writer.Flush(); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// options are the autoscaler's flags the verdict depends on, read with Go's flag package under the autoscaler's own
// names and defaults (main.go of the release), plus --gpu-label: the kwok provider's nodes.gpuConfig.gpuLabelKey.
type options struct {
	threshold, gpuThreshold            float64
	ignoreDaemonSets, ignoreMirrorPods bool
	skipSystemPods, skipLocalStorage   bool
	skipCustomControllerPods           bool
	bspDisruptionTimeout               time.Duration
	minReplicaCount                    int
	gpuLabel                           string
}

func registerFlags(fs *flag.FlagSet) *options {
	o := &options{}
	fs.Float64Var(&o.threshold, "scale-down-utilization-threshold", 0.5, "")
	fs.Float64Var(&o.gpuThreshold, "scale-down-gpu-utilization-threshold", 0.5, "")
	fs.BoolVar(&o.ignoreDaemonSets, "ignore-daemonsets-utilization", false, "")
	fs.BoolVar(&o.ignoreMirrorPods, "ignore-mirror-pods-utilization", false, "")
	fs.BoolVar(&o.skipSystemPods, "skip-nodes-with-system-pods", true, "")
	fs.BoolVar(&o.skipLocalStorage, "skip-nodes-with-local-storage", true, "")
	fs.BoolVar(&o.skipCustomControllerPods, "skip-nodes-with-custom-controller-pods", true, "")
	fs.IntVar(&o.minReplicaCount, "min-replica-count", 0, "")
	fs.StringVar(&o.gpuLabel, "gpu-label", "k8s.amazonaws.com/accelerator", "the kwok provider's GPU label key")
	registerReleaseFlags(fs, o)
	return o
}

// answer is what the oracle says about one dump.
type answer struct {
	Release string       `json:"release"`
	Error   string       `json:"error,omitempty"`
	Nodes   []nodeAnswer `json:"nodes"`
}

func answer_(err error) answer {
	return answer{Release: version.ClusterAutoscalerVersion, Error: err.Error(), Nodes: []nodeAnswer{}}
}

type gpuAnswer struct {
	Label    string `json:"label"`
	Type     string `json:"type"`
	Resource string `json:"resource"`
}

type utilizationAnswer struct {
	CPU      number `json:"cpu"`
	Memory   number `json:"memory"`
	GPU      number `json:"gpu"`
	Value    number `json:"value"`
	Resource string `json:"resource"`
}

type podAnswer struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	Error     string `json:"error,omitempty"`
	Panic     string `json:"panic,omitempty"`
}

type nodeAnswer struct {
	Node              string             `json:"node"`
	ScaleDownDisabled bool               `json:"scale_down_disabled"`
	GPU               *gpuAnswer         `json:"gpu"`
	Threshold         float64            `json:"threshold"`
	Utilization       *utilizationAnswer `json:"utilization"`
	UtilizationError  string             `json:"utilization_error,omitempty"`
	Underutilized     *bool              `json:"underutilized"`
	Pods              []podAnswer        `json:"pods"`
	// Panic: the pod lister (neon's patch) panicked on these pods: the running autoscaler would crash on them.
	Panic map[string]string `json:"panic,omitempty"`
}

// number is a float64 printed exactly (Go's shortest round-trip form; -0 as -0.0), NaN and ±Inf as the strings "NaN",
// "+Inf", "-Inf" (JSON has no such numbers).
type number float64

func (n number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Inf"`), nil
	case f == 0 && math.Signbit(f):
		return []byte(`-0.0`), nil // json.Marshal writes "-0", which reads back as the integer 0
	}
	return json.Marshal(f)
}

func judgeRequest(raw []byte, o *options, now string) answer {
	moment, err := time.Parse(time.RFC3339Nano, now)
	if err != nil {
		return answer_(fmt.Errorf("--now %q is not an RFC 3339 time", now))
	}
	d, err := readDump(raw)
	if err != nil {
		return answer_(err)
	}
	nodes, err := judge(d, o, moment)
	if err != nil {
		return answer_(err)
	}
	return answer{Release: version.ClusterAutoscalerVersion, Nodes: nodes}
}
