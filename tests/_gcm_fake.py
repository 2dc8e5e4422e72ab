"""A loopback fake of Cloud Monitoring's ``MetricService.CreateTimeSeries``, for the real
client library (shared by the exporter and the compat monitor tests).

The client's only transports are gRPC ones (no REST), so the fake is a ``grpc`` server on
127.0.0.1 and the client talks to it over an insecure channel: no credentials, nothing
leaves the machine. grpc and google-cloud-monitoring are imported when a fake is built
(callers ``pytest.importorskip`` them first).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any


class FakeMetricService:
    """Records every ``CreateTimeSeriesRequest``; answers after ``delay`` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        import grpc
        from google.cloud import monitoring_v3

        self.requests: list[Any] = []  # CreateTimeSeriesRequest
        self.delay = delay
        self._lock = threading.Lock()

        def create_time_series(request: Any, context: Any) -> bytes:
            if self.delay:
                time.sleep(self.delay)
            with self._lock:
                self.requests.append(request)
            return b""  # google.protobuf.Empty

        handler = grpc.method_handlers_generic_handler(
            "google.monitoring.v3.MetricService",
            {
                "CreateTimeSeries": grpc.unary_unary_rpc_method_handler(
                    create_time_series,
                    request_deserializer=monitoring_v3.CreateTimeSeriesRequest.deserialize,
                    response_serializer=lambda empty: empty,
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def client(self) -> Any:
        """The real MetricServiceClient, over an insecure loopback channel."""
        import grpc
        from google.cloud import monitoring_v3
        from google.cloud.monitoring_v3.services.metric_service import transports

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        transport = transports.MetricServiceGrpcTransport(channel=channel)
        return monitoring_v3.MetricServiceClient(transport=transport)

    def series(self, *, strip: str = "") -> list[dict[str, Any]]:
        """Every time series received, flattened; ``strip``: a prefix cut from the types."""
        out = []
        for req in self.requests:
            for ts in req.time_series:
                (point,) = ts.points
                kind = point.value._pb.WhichOneof("value")
                metric_type = ts.metric.type
                if strip and metric_type.startswith(strip):
                    metric_type = metric_type[len(strip) :]
                out.append(
                    {
                        "project": req.name,
                        "type": metric_type,
                        "labels": dict(ts.metric.labels),
                        "resource_type": ts.resource.type,
                        "resource": dict(ts.resource.labels),
                        "kind": kind,
                        "value": getattr(point.value, kind),
                        "end": point.interval.end_time.timestamp(),
                    }
                )
        return out

    def stop(self) -> None:
        self.server.stop(0)
