# meshdash: one image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.lock pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
 && DEBUG=true python manage.py collect_plotly \
 && DEBUG=true python manage.py collectstatic --noinput
# /var/lib/meshdash/metrics: PROMETHEUS_MULTIPROC_DIR; a new volume mounted there takes this owner.
RUN useradd --system --uid 1000 meshdash && chown -R meshdash /app \
    && mkdir -p /var/lib/meshdash/metrics && chown meshdash /var/lib/meshdash/metrics
USER meshdash
EXPOSE 8000
CMD ["gunicorn", "meshdash.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
