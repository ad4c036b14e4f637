/**
 * Images in the composer: pasted or dropped, checked against the daemon's limits before they are
 * kept (so the user learns at once, not when sending), shown as thumbnail chips that can be
 * removed, and handed to the send as `chat/send`'s `images`.
 */

import type { ImageInput } from '../model/wire';

/** The media types the daemon accepts, with the name a message gives each. */
export const IMAGE_TYPES: Record<string, string> = {
  'image/png': 'PNG',
  'image/jpeg': 'JPEG',
  'image/gif': 'GIF',
  'image/webp': 'WebP',
};
/** The daemon's limits (docs/images.md): bytes per image once decoded, images per message. */
export const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
export const MAX_IMAGES = 20;

/** `512 B`, `48.2 KB`, `5.1 MB`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/**
 * Why an image of this type and size cannot join a message already holding `count` images, or
 * nothing when it can.
 */
export function imageRefusal(name: string, type: string, size: number, count: number): string | undefined {
  if (!(type in IMAGE_TYPES)) return `${name} is not a PNG, JPEG, GIF or WebP image (${type || 'unknown type'}), so it cannot be sent.`;
  if (size > MAX_IMAGE_BYTES) return `${name} is ${size.toLocaleString('en-US')} bytes, over the limit of ${MAX_IMAGE_BYTES.toLocaleString('en-US')} bytes (5 MiB) per image.`;
  if (count >= MAX_IMAGES) return `${name} was not added: a message holds at most ${MAX_IMAGES} images.`;
  return undefined;
}

interface Pending {
  name: string;
  mediaType: string;
  size: number;
  /** The image as a `data:` URL, once read. */
  url?: string;
}

export class ImageTray {
  readonly el = document.createElement('div');
  private images: Pending[] = [];

  constructor(
    /** Said when a pasted or dropped file cannot be sent. */
    private readonly refuse: (message: string) => void,
  ) {
    this.el.className = 'composer-images';
    this.el.setAttribute('aria-label', 'Images to send');
    this.el.setAttribute('role', 'group');
    this.render();
  }

  get count(): number {
    return this.images.length;
  }

  /**
   * Takes the images of a paste or a drop: answers whether there were any (then the event was
   * about images, and the caller keeps it from doing anything else).
   */
  add(files: File[]): boolean {
    const images = files.filter((f) => f.type.startsWith('image/') || f.type === '');
    if (images.length === 0) return false;
    for (const file of images) {
      const name = file.name || 'pasted image';
      const refusal = imageRefusal(name, file.type, file.size, this.images.length);
      if (refusal) {
        this.refuse(refusal);
        continue;
      }
      const image: Pending = { name, mediaType: file.type, size: file.size };
      this.images.push(image);
      const reader = new FileReader();
      reader.addEventListener('load', () => {
        image.url = String(reader.result);
        this.render();
      });
      reader.addEventListener('error', () => {
        this.images = this.images.filter((i) => i !== image);
        this.refuse(`${name} could not be read.`);
        this.render();
      });
      reader.readAsDataURL(file);
    }
    this.render();
    return true;
  }

  /** Whether every image added has been read (only then can the message go). */
  get ready(): boolean {
    return this.images.every((i) => i.url !== undefined);
  }

  /** The images for `chat/send`, taken out of the composer. */
  take(): ImageInput[] {
    const out = this.images.flatMap((i) => (i.url ? [{ mediaType: i.mediaType, data: i.url.slice(i.url.indexOf(',') + 1) }] : []));
    this.images = [];
    this.render();
    return out;
  }

  private render(): void {
    this.el.hidden = this.images.length === 0;
    this.el.replaceChildren(
      ...this.images.map((image, i) => {
        const chip = document.createElement('span');
        chip.className = 'image-chip';
        chip.dataset.mediaType = image.mediaType;
        const label = `${image.name} (${IMAGE_TYPES[image.mediaType]}, ${formatBytes(image.size)})`;
        chip.title = label;
        if (image.url) {
          const img = document.createElement('img');
          img.src = image.url;
          img.alt = label;
          chip.append(img);
        } else {
          const reading = document.createElement('span');
          reading.className = 'reading';
          reading.textContent = `Reading ${image.name}…`;
          chip.append(reading);
        }
        const remove = document.createElement('button');
        remove.type = 'button';
        remove.className = 'remove';
        remove.textContent = '×';
        remove.title = `Remove ${image.name}`;
        remove.setAttribute('aria-label', `Remove ${image.name}`);
        remove.addEventListener('click', () => {
          this.images.splice(i, 1);
          this.render();
        });
        chip.append(remove);
        return chip;
      }),
    );
  }
}

/**
 * Thumbnails of the transcript's images, each read once with `session/image` (through the host)
 * and kept by image id: redrawing an entry, or the same image in another message, asks nothing.
 */
export class ImageCache {
  private readonly urls = new Map<string, string>();
  private readonly failed = new Map<string, string>();
  private readonly asked = new Set<string>();
  /** Thumbnails drawn before their bytes came, by image id. */
  private readonly waiting = new Map<string, Set<HTMLImageElement>>();

  constructor(private readonly ask: (imageId: string) => void) {}

  /** A thumbnail of the image, its bytes filled in once the host sends them. */
  thumbnail(ref: { imageId: string; mediaType: string; width: number; height: number; bytes: number }): HTMLElement {
    const figure = document.createElement('span');
    figure.className = 'thumbnail';
    figure.dataset.imageId = ref.imageId;
    const label = `Image (${IMAGE_TYPES[ref.mediaType] ?? ref.mediaType}, ${ref.width}×${ref.height}, ${formatBytes(ref.bytes)})`;
    figure.title = label;
    const img = document.createElement('img');
    img.alt = label;
    img.width = Math.min(ref.width, 96);
    figure.append(img);
    const url = this.urls.get(ref.imageId);
    const failed = this.failed.get(ref.imageId);
    if (url) {
      img.src = url;
    } else if (failed) {
      figure.dataset.error = failed;
    } else {
      const set = this.waiting.get(ref.imageId) ?? new Set();
      set.add(img);
      this.waiting.set(ref.imageId, set);
      if (!this.asked.has(ref.imageId)) {
        this.asked.add(ref.imageId);
        this.ask(ref.imageId);
      }
    }
    return figure;
  }

  /** The host's answer for an image: its bytes, or why there are none. */
  receive(imageId: string, mediaType: string | undefined, data: string | undefined, error: string | undefined): void {
    const images = this.waiting.get(imageId) ?? new Set<HTMLImageElement>();
    this.waiting.delete(imageId);
    if (data === undefined || mediaType === undefined) {
      this.failed.set(imageId, error ?? 'not found');
      for (const img of images) if (img.parentElement) img.parentElement.dataset.error = error ?? 'not found';
      return;
    }
    const url = `data:${mediaType};base64,${data}`;
    this.urls.set(imageId, url);
    for (const img of images) img.src = url;
  }
}
