// Package admission decides, before a push's body is read, whether the Collector reads it at all, and
// bounds what it reads.
//
// It is an HTTP server middleware (confighttp's "middlewares"): it runs after the oidc authenticator
// has verified the token and after decompression is set up, before the OTLP handler reads the body.
// In that order it:
//  1. refuses (403) a push whose verified token is not the agent's ServiceAccount or names no node,
//     so a tenant's token never gets a slot and never has its body read or decoded;
//  2. refuses (415) any body but protobuf (the agent's encoding; JSON decodes to far more memory);
//  3. gives the push a slot: at most max_requests_per_node of one node's pushes are admitted or waiting
//     at once (refused 429 at once beyond that), and at most max_concurrent_requests in all (a push
//     that finds no slot within max_wait is refused 429 with Retry-After);
//  4. reads the body within body_timeout of getting the slot (408 after it: a sender trickling its body
//     holds a slot that long at most), at most the receiver's max_request_body_size (413);
//  5. counts the body's items on the wire without decoding it (resources, scopes, metrics, data points,
//     attributes, exemplars, quantiles, and each of a histogram's bounds and bucket counts) and refuses
//     (413) more than max_items_per_request, so what the OTLP handler decodes is bounded by what an honest
//     agent sends, not by the body's bytes.
//
// Every refusal made here is counted in otelcol_admission_refused_requests{reason,node} (node empty for a
// token that names none), a gzip body over the size once decompressed included (body_size: it is read
// here). What confighttp refuses before the middleware runs is not: the oidc authenticator's 401 (no,
// invalid or expired token) and the decompressor's 400 (a Content-Encoding not taken, a gzip header that
// does not parse); docs/deployment.md says where those show. No component of the 0.165 release does any of this: memory_limiter refuses data
// only after it has been read and decoded, and the memorylimiter extension is not released past v0.149.
package admission

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"nra.local/nodeidentityprocessor/internal/subject"
)

const typeStr = "admission"

// Reasons of a refusal, the reason label of otelcol_admission_refused_requests.
const (
	ReasonSubject     = "subject"      // 403: not the agent's token, or a token naming no node
	ReasonContentType = "content_type" // 415: not protobuf
	ReasonNodeShare   = "node_share"   // 429: the node already holds max_requests_per_node
	ReasonBusy        = "busy"         // 429: no slot within max_wait
	ReasonBodyTimeout = "body_timeout" // 408: the body did not arrive within body_timeout
	ReasonBodySize    = "body_size"    // 413: over max_request_body_size, received or decompressed
	ReasonBodyRead    = "body_read"    // 400: the body could not be read (a broken gzip stream, a reset)
	ReasonMalformed   = "malformed"    // 400: not a protobuf ExportMetricsServiceRequest
	ReasonItems       = "items"        // 413: more than max_items_per_request
)

// Config of the extension.
type Config struct {
	// ServiceAccount is the agent's, as the nodeidentity processor names it (system:serviceaccount:<ns>:<name>).
	ServiceAccount string `mapstructure:"service_account"`
	// MaxConcurrentRequests is how many requests are read and processed at once.
	MaxConcurrentRequests int `mapstructure:"max_concurrent_requests"`
	// MaxRequestsPerNode is how many of them (admitted or waiting) one node may have at once.
	MaxRequestsPerNode int `mapstructure:"max_requests_per_node"`
	// MaxWait is how long a request waits for a slot before it is refused with 429.
	MaxWait time.Duration `mapstructure:"max_wait"`
	// BodyTimeout is how long, from getting its slot, a request may take to deliver its body.
	BodyTimeout time.Duration `mapstructure:"body_timeout"`
	// MaxItemsPerRequest bounds the OTLP elements (see the package comment) one request may carry.
	MaxItemsPerRequest int `mapstructure:"max_items_per_request"`
}

// Validate is called by the Collector when it loads the configuration.
func (c *Config) Validate() error {
	switch {
	case c.ServiceAccount == "":
		return errors.New("service_account is required (the agent's system:serviceaccount:<namespace>:<name>)")
	case c.MaxConcurrentRequests < 1:
		return errors.New("max_concurrent_requests must be at least 1")
	case c.MaxRequestsPerNode < 1 || c.MaxRequestsPerNode > c.MaxConcurrentRequests:
		return errors.New("max_requests_per_node must be between 1 and max_concurrent_requests")
	case c.MaxWait < 0:
		return errors.New("max_wait must not be negative")
	case c.BodyTimeout <= 0:
		return errors.New("body_timeout must be positive")
	case c.MaxItemsPerRequest < 1:
		return errors.New("max_items_per_request must be at least 1")
	}
	return nil
}

// NewFactory is what the builder's components.go registers.
func NewFactory() extension.Factory {
	return extension.NewFactory(component.MustNewType(typeStr),
		func() component.Config {
			return &Config{MaxConcurrentRequests: 8, MaxRequestsPerNode: 2, MaxWait: 2 * time.Second,
				BodyTimeout: 5 * time.Second, MaxItemsPerRequest: 65536}
		},
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			return newLimiter(cfg.(*Config), set.TelemetrySettings.MeterProvider.Meter("nra.local/nodeidentityprocessor/admission"))
		}, component.StabilityLevelDevelopment)
}

// Limiter is the extension: a semaphore of MaxConcurrentRequests slots and a count of each node's share.
type Limiter struct {
	component.StartFunc
	component.ShutdownFunc
	cfg     Config
	slots   chan struct{}
	mu      sync.Mutex
	held    map[string]int // node -> requests admitted or waiting
	refused metric.Int64Counter
}

var _ extensionmiddleware.HTTPServer = (*Limiter)(nil)

func newLimiter(c *Config, meter metric.Meter) (*Limiter, error) {
	refused, err := meter.Int64Counter("otelcol_admission_refused_requests",
		metric.WithDescription("OTLP/HTTP requests the admission extension refused, by reason and by the node "+
			"their token names (empty when it names none)"),
		metric.WithUnit("{request}"))
	return &Limiter{cfg: *c, slots: make(chan struct{}, c.MaxConcurrentRequests), held: map[string]int{},
		refused: refused}, err
}

// GetHTTPHandler wraps the receiver's handler.
func (l *Limiter) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) }), nil
	}, nil
}

func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	node, err := subject.Node(r.Context(), l.cfg.ServiceAccount)
	if err != nil {
		l.refuse(w, r, "", ReasonSubject, http.StatusForbidden, err.Error())
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-protobuf" {
		l.refuse(w, r, node, ReasonContentType, http.StatusUnsupportedMediaType, "only application/x-protobuf is taken")
		return
	}
	release, reason := l.acquire(r.Context(), node)
	if release == nil {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(l.cfg.MaxWait/time.Second))))
		l.refuse(w, r, node, reason, http.StatusTooManyRequests, "too many concurrent requests")
		return
	}
	defer release()
	// The deadline replaces the server's read_timeout for the rest of this request: the time a sender
	// may take to deliver its body counts from its slot, not from its connection.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.cfg.BodyTimeout))
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			l.refuse(w, r, node, ReasonBodySize, http.StatusRequestEntityTooLarge, err.Error())
		case errors.As(err, &netErr) && netErr.Timeout():
			l.refuse(w, r, node, ReasonBodyTimeout, http.StatusRequestTimeout, "body not received within body_timeout")
		default:
			l.refuse(w, r, node, ReasonBodyRead, http.StatusBadRequest, err.Error())
		}
		return
	}
	if _, err := countItems(body, l.cfg.MaxItemsPerRequest); err != nil {
		if errors.Is(err, errTooMany) {
			l.refuse(w, r, node, ReasonItems, http.StatusRequestEntityTooLarge, err.Error())
		} else {
			l.refuse(w, r, node, ReasonMalformed, http.StatusBadRequest, err.Error())
		}
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	next.ServeHTTP(w, r)
}

func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, node, reason string, code int, msg string) {
	l.refused.Add(r.Context(), 1, metric.WithAttributes(attribute.String("reason", reason), attribute.String("node", node)))
	http.Error(w, msg, code)
}

// acquire takes the node's share and then a slot; it returns how to give both back, or nil and why not.
func (l *Limiter) acquire(ctx context.Context, node string) (func(), string) {
	l.mu.Lock()
	if l.held[node] >= l.cfg.MaxRequestsPerNode {
		l.mu.Unlock()
		return nil, ReasonNodeShare
	}
	l.held[node]++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if l.held[node]--; l.held[node] == 0 {
			delete(l.held, node)
		}
		l.mu.Unlock()
	}
	if !l.slot(ctx) {
		leave()
		return nil, ReasonBusy
	}
	return func() { <-l.slots; leave() }, ""
}

func (l *Limiter) slot(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(l.cfg.MaxWait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}
