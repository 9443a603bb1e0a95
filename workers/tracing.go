package workers

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/fx"

	"github.com/spiderpool/spiderpool/config"
)

// tracing is the node's OpenTelemetry tracing through the Temporal SDK's
// interceptor (workflow, activity, signal and update spans, propagated
// from client to workflow to activity), exported over OTLP/gRPC when
// --otlp-endpoint is set; nil otherwise.
type tracing struct {
	interceptors []interceptor.ClientInterceptor
	// tracer makes the spans of the batches nodes take from Postgres
	// (pool runs), which are no Temporal activities; nil when not tracing.
	tracer trace.Tracer
}

func newTracing(lc fx.Lifecycle, cfg config.Config, log *slog.Logger) (*tracing, error) {
	if cfg.Node.OTLPEndpoint == "" {
		return &tracing{}, nil
	}
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(cfg.Node.OTLPEndpoint))
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %s: %w", cfg.Node.OTLPEndpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(
			semconv.ServiceName("spiderpool"),
			attribute.String("spiderpool.node", cfg.Node.ID),
		)),
	)
	ic, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("spiderpool")})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	lc.Append(fx.StopHook(func(ctx context.Context) error {
		return tp.Shutdown(ctx) // flushes what is batched
	}))
	log.Info("exporting traces", "otlp_endpoint", cfg.Node.OTLPEndpoint)
	return &tracing{interceptors: []interceptor.ClientInterceptor{ic}, tracer: tp.Tracer("spiderpool")}, nil
}
