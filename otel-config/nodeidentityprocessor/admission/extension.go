// Package admission bounds how many OTLP/HTTP requests the Collector reads and processes at once.
//
// confighttp (v1.71) bounds each request's body (max_request_body_size, on the received and on the
// decompressed bytes) but not how many requests run together: 30 parallel maximum-size pushes hold
// 30 bodies and their decoded copies. This extension is an HTTP server middleware
// (confighttp's "middlewares"); it runs after authentication and decompression are set up and before
// the OTLP handler reads the body, so a request waiting for a slot holds no body in memory. A request
// that finds no slot within max_wait is answered 429 with Retry-After (the agent retries it).
//
// No component of the 0.165 release does this: memory_limiter refuses data only after it has been
// read and decoded, and the memorylimiter extension is not released past v0.149.
package admission

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensionmiddleware"
	"go.opentelemetry.io/otel/metric"
)

const typeStr = "admission"

// Config of the extension.
type Config struct {
	// MaxConcurrentRequests is how many requests are read and processed at once.
	MaxConcurrentRequests int `mapstructure:"max_concurrent_requests"`
	// MaxWait is how long a request waits for a slot before it is refused with 429.
	MaxWait time.Duration `mapstructure:"max_wait"`
}

// Validate is called by the Collector when it loads the configuration.
func (c *Config) Validate() error {
	if c.MaxConcurrentRequests < 1 {
		return errors.New("max_concurrent_requests must be at least 1")
	}
	if c.MaxWait < 0 {
		return errors.New("max_wait must not be negative")
	}
	return nil
}

// NewFactory is what the builder's components.go registers.
func NewFactory() extension.Factory {
	return extension.NewFactory(component.MustNewType(typeStr),
		func() component.Config { return &Config{MaxConcurrentRequests: 8, MaxWait: 2 * time.Second} },
		func(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			return newLimiter(cfg.(*Config), set.TelemetrySettings.MeterProvider.Meter("nra.local/nodeidentityprocessor/admission"))
		}, component.StabilityLevelDevelopment)
}

// Limiter is the extension: a semaphore of MaxConcurrentRequests slots.
type Limiter struct {
	component.StartFunc
	component.ShutdownFunc
	slots   chan struct{}
	wait    time.Duration
	refused metric.Int64Counter
}

var _ extensionmiddleware.HTTPServer = (*Limiter)(nil)

func newLimiter(c *Config, meter metric.Meter) (*Limiter, error) {
	refused, err := meter.Int64Counter("otelcol_admission_refused_requests",
		metric.WithDescription("Requests refused with 429 because every slot stayed taken for max_wait"),
		metric.WithUnit("{request}"))
	return &Limiter{slots: make(chan struct{}, c.MaxConcurrentRequests), wait: c.MaxWait, refused: refused}, err
}

// GetHTTPHandler wraps the receiver's handler.
func (l *Limiter) GetHTTPHandler(context.Context) (extensionmiddleware.WrapHTTPHandlerFunc, error) {
	return func(_ context.Context, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !l.acquire(r.Context()) {
				l.refused.Add(r.Context(), 1)
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(l.wait/time.Second))))
				http.Error(w, "too many concurrent requests", http.StatusTooManyRequests)
				return
			}
			defer func() { <-l.slots }()
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

func (l *Limiter) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(l.wait)
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
