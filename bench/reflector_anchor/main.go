// reflector-anchor runs client-go's own informers as the node agents' anchor in the scale benchmark
// (bench/cluster_scale/): for every target node, one clientset (its own connection, its own token),
// a pod informer limited to spec.nodeName=<node> and a Node informer limited to metadata.name=<node>,
// the same two field-selected list-and-watches the agent makes, with client-go's default reflector
// backoff (0.8 s doubling to 30 s, jitter 1.0, reset after 2 min), which the agent copies.
//
// Every LIST and WATCH call it makes, failed or not, and every pod named marker-* it sees added, is
// written to stdout as one JSON line, so the benchmark can compare reconnection timing after an API
// server restart with the agents'.
//
// Usage: reflector-anchor -server URL -ca FILE -targets FILE (a JSON list of {"node", "token_file"}).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

type target struct {
	Node      string `json:"node"`
	TokenFile string `json:"token_file"`
}

type record struct {
	T        float64 `json:"t"`
	Node     string  `json:"node"`
	Resource string  `json:"resource"`
	Event    string  `json:"event"`
	Detail   string  `json:"detail,omitempty"`
}

var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func emit(node, resource, event, detail string) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(record{T: float64(time.Now().UnixNano()) / 1e9, Node: node, Resource: resource, Event: event, Detail: detail})
}

func errText(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// listWatch is the informer's ListWatch with every call reported; sendInitialEvents marks a streaming list.
func listWatch(node, resource, selector string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			obj, err := list(ctx, opts)
			if err != nil {
				emit(node, resource, "list_error", errText(err))
			} else {
				emit(node, resource, "list", "")
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			kind := "watch"
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				kind = "watchlist"
			}
			w, err := watchFn(ctx, opts)
			if err != nil {
				emit(node, resource, kind+"_error", errText(err))
			} else {
				emit(node, resource, kind, "")
			}
			return w, err
		},
	}
}

func run(ctx context.Context, server, ca string, t target) {
	cfg := &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAFile: ca},
		BearerTokenFile: t.TokenFile,
		UserAgent:       "reflector-anchor",
		// A Dial of its own keeps client-go from sharing one cached transport (one HTTP/2 connection)
		// between the clientsets: every node's client has its own connection, as every agent has.
		Dial: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		emit(t.Node, "", "fatal", errText(err))
		return
	}
	pods := cache.NewSharedIndexInformer(listWatch(t.Node, "pods", "spec.nodeName="+t.Node,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cs.CoreV1().Pods("").List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cs.CoreV1().Pods("").Watch(ctx, o) }),
		&corev1.Pod{}, 0, cache.Indexers{})
	nodes := cache.NewSharedIndexInformer(listWatch(t.Node, "nodes", "metadata.name="+t.Node,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cs.CoreV1().Nodes().List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cs.CoreV1().Nodes().Watch(ctx, o) }),
		&corev1.Node{}, 0, cache.Indexers{})
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
		if p, ok := obj.(*corev1.Pod); ok && strings.HasPrefix(p.Name, "marker-") {
			emit(t.Node, "pods", "marker", p.Namespace+"/"+p.Name)
		}
	}})
	go pods.RunWithContext(ctx)
	go nodes.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		emit(t.Node, "", "synced", fmt.Sprint(len(pods.GetStore().List())))
	}
}

func main() {
	server := flag.String("server", "", "API server URL")
	ca := flag.String("ca", "", "CA bundle of the API server")
	targets := flag.String("targets", "", "JSON file: [{\"node\": ..., \"token_file\": ...}]")
	flag.Parse()
	raw, err := os.ReadFile(*targets)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var list []target
	if err := json.Unmarshal(raw, &list); err != nil || *server == "" || *ca == "" {
		fmt.Fprintln(os.Stderr, "usage: reflector-anchor -server URL -ca FILE -targets FILE", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	for _, t := range list {
		go run(ctx, *server, *ca, t)
	}
	<-ctx.Done()
}
